// tests/core/test_reduce.cpp — sum/mean over any dims (keepdim, non-contiguous, large),
// max/min with indices and ties, argmax/argmin, sum_to, and the errors.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "core/factory.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "tests/support/errors.h"

namespace ls = lockstep;
using lockstep::testing::error_of;
namespace nv = lockstep::native;

namespace {
ls::Tensor iota(const ls::IntList& sizes, ls::ScalarType dtype = ls::kFloat32) {
  return nv::reshape(ls::arange(0, ls::numel_of(sizes), 1, dtype), sizes);
}
std::vector<float> fv(const ls::Tensor& t) { return t.to_vector<float>(); }
}  // namespace

TEST_CASE("reduce: sum over all dims, one dim, negative dims and keepdim") {
  ls::Tensor a = iota({2, 3});  // [[0 1 2] [3 4 5]]
  ls::Tensor all = nv::sum(a, {}, false);
  CHECK(all.dim() == 0);
  CHECK(all.item<float>() == 15.0f);
  CHECK(nv::sum(a, {}, true).sizes() == ls::IntList{1, 1});
  CHECK(fv(nv::sum(a, {0}, false)) == std::vector<float>{3, 5, 7});
  CHECK(fv(nv::sum(a, {1}, false)) == std::vector<float>{3, 12});
  CHECK(fv(nv::sum(a, {-1}, false)) == std::vector<float>{3, 12});
  ls::Tensor k = nv::sum(a, {1}, true);
  CHECK(k.sizes() == ls::IntList{2, 1});
  CHECK(fv(k) == std::vector<float>{3, 12});
  CHECK(nv::sum(a, {0, 1}, false).item<float>() == 15.0f);
  CHECK(nv::sum(ls::scalar_tensor(4.0), {}, false).item<float>() == 4.0f);  // 0-d
}

TEST_CASE("reduce: sum over several dims, adjacent or not, matches a loop") {
  const int64_t A = 3, B = 4, C = 5, D = 6;
  ls::Tensor x = ls::randn({A, B, C, D}, ls::kFloat64);
  std::vector<double> xv = x.to_vector<double>();
  auto at = [&](int64_t a, int64_t b, int64_t c, int64_t d) { return xv[((a * B + b) * C + c) * D + d]; };

  // {0, 2, 3}: two separate blocks of reduced dims, like batch norm over (N, H, W).
  ls::Tensor s = nv::sum(x, {0, 2, 3}, true);
  CHECK(s.sizes() == ls::IntList{1, B, 1, 1});
  std::vector<double> sv = s.to_vector<double>();
  for (int64_t b = 0; b < B; ++b) {
    double ref = 0;
    for (int64_t a = 0; a < A; ++a)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t d = 0; d < D; ++d) ref += at(a, b, c, d);
    CHECK(sv[b] == doctest::Approx(ref).epsilon(1e-12));
  }
  // {1, 2}: a middle block -> (A, D).
  std::vector<double> mv = nv::sum(x, {2, 1}, false).to_vector<double>();
  for (int64_t a = 0; a < A; ++a) {
    for (int64_t d = 0; d < D; ++d) {
      double ref = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < C; ++c) ref += at(a, b, c, d);
      CHECK(mv[a * D + d] == doctest::Approx(ref).epsilon(1e-12));
    }
  }
  // mean over {1, 3} with keepdim.
  ls::Tensor m = nv::mean(x, {1, 3}, true);
  CHECK(m.sizes() == ls::IntList{A, 1, C, 1});
  std::vector<double> meanv = m.to_vector<double>();
  for (int64_t a = 0; a < A; ++a) {
    for (int64_t c = 0; c < C; ++c) {
      double ref = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t d = 0; d < D; ++d) ref += at(a, b, c, d);
      CHECK(meanv[a * C + c] == doctest::Approx(ref / (B * D)).epsilon(1e-12));
    }
  }
}

TEST_CASE("reduce: non-contiguous input, integer and bool sums, empty dims") {
  ls::Tensor t = nv::transpose(iota({2, 3}), 0, 1);  // (3, 2): [[0 3] [1 4] [2 5]]
  CHECK(fv(nv::sum(t, {1}, false)) == std::vector<float>{3, 5, 7});
  CHECK(fv(nv::sum(t, {0}, false)) == std::vector<float>{3, 12});
  CHECK(fv(nv::mean(nv::narrow(iota({2, 4}), 1, 1, 2), {1}, false)) == std::vector<float>{1.5, 5.5});

  ls::Tensor i32 = ls::tensor(std::vector<int32_t>{2000000000, 2000000000}, {2});
  ls::Tensor si = nv::sum(i32, {}, false);
  CHECK(si.dtype() == ls::kInt64);  // no int32 overflow
  CHECK(si.item<int64_t>() == 4000000000LL);
  ls::Tensor mask = nv::compare_scalar(ls::native::CompareOp::Gt, iota({2, 3}), 1.5);
  ls::Tensor count = nv::sum(mask, {1}, false);
  CHECK(count.dtype() == ls::kInt64);
  CHECK(count.to_vector<int64_t>() == std::vector<int64_t>{1, 3});

  ls::Tensor e = ls::zeros({0, 3});
  CHECK(fv(nv::sum(e, {0}, false)) == std::vector<float>{0, 0, 0});
  CHECK(nv::sum(e, {1}, false).sizes() == ls::IntList{0});
  CHECK(std::isnan(nv::mean(e, {}, false).item<float>()));
}

TEST_CASE("reduce: float32 sums are accurate and independent of the thread count") {
  const int saved = ls::get_num_threads();
  const int64_t n = 3000001;  // many blocks, not a multiple of the block size
  ls::Tensor x = ls::full({n}, 0.1);
  ls::set_num_threads(1);
  const float one = nv::sum(x, {}, false).item<float>();
  ls::set_num_threads(4);
  const float four = nv::sum(x, {}, false).item<float>();
  CHECK(one == four);
  CHECK(one == static_cast<float>(n * static_cast<double>(0.1f)));  // double accumulation
  CHECK(nv::mean(x, {}, false).item<float>() == 0.1f);

  // Rows of a (rows, cols) matrix, in parallel over rows, and the outer-dim (bias
  // gradient) case, in parallel over columns.
  ls::Tensor m = ls::randn({4096, 130});
  std::vector<float> mv = fv(m);
  std::vector<float> rows = fv(nv::sum(m, {1}, false));
  std::vector<float> cols = fv(nv::sum(m, {0}, false));
  std::vector<double> col_ref(130, 0.0);
  for (int64_t i = 0; i < 4096; ++i) {
    double r = 0;
    for (int64_t j = 0; j < 130; ++j) {
      r += mv[i * 130 + j];
      col_ref[j] += mv[i * 130 + j];
    }
    CHECK(rows[i] == static_cast<float>(r));
  }
  for (int64_t j = 0; j < 130; ++j) CHECK(cols[j] == static_cast<float>(col_ref[j]));
  ls::set_num_threads(saved);
}

TEST_CASE("reduce: max and min, over all and along a dim, with the first index among ties") {
  ls::Tensor a = ls::tensor(std::vector<float>{1, 7, 7, 3, -2, 0, 5, -2, 5}, {3, 3});  // [[1 7 7] [3 -2 0] [5 -2 5]]
  CHECK(nv::max_all(a).item<float>() == 7.0f);
  CHECK(nv::min_all(a).item<float>() == -2.0f);
  CHECK(nv::max_all(a).dim() == 0);
  auto [vals, idx] = nv::max_dim(a, 1, false);
  CHECK(fv(vals) == std::vector<float>{7, 3, 5});
  CHECK(idx.dtype() == ls::kInt64);
  CHECK(idx.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0});  // ties -> first
  auto [minv, mini] = nv::min_dim(a, 0, true);
  CHECK(minv.sizes() == ls::IntList{1, 3});
  CHECK(fv(minv) == std::vector<float>{1, -2, 0});
  CHECK(mini.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1});
  CHECK(nv::argmax(a, 0, false).to_vector<int64_t>() == std::vector<int64_t>{2, 0, 0});
  CHECK(nv::argmin(a, -1, false).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1});
  CHECK(nv::argmax(ls::zeros({4}), 0, false).item<int64_t>() == 0);  // all tied
  // Non-contiguous: along dim 1 of the transpose is along dim 0 of a.
  CHECK(nv::argmax(nv::transpose(a, 0, 1), 1, false).to_vector<int64_t>() ==
        std::vector<int64_t>{2, 0, 0});
  // Integers keep their dtype; NaN wins like in PyTorch.
  ls::Tensor i = ls::tensor(std::vector<int64_t>{4, 9, 9, 1}, {4});
  CHECK(nv::max_all(i).item<int64_t>() == 9);
  CHECK(nv::argmax(i, 0, false).item<int64_t>() == 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ls::Tensor n = ls::tensor(std::vector<float>{1, nan, 3}, {3});
  CHECK(std::isnan(nv::max_all(n).item<float>()));
  CHECK(nv::argmin(n, 0, false).item<int64_t>() == 1);
}

TEST_CASE("reduce: argmax over a large middle dim matches a loop") {
  ls::Tensor x = ls::randn({7, 513, 11});
  std::vector<float> xv = fv(x);
  std::vector<int64_t> got = nv::argmax(x, 1, false).to_vector<int64_t>();
  for (int64_t a = 0; a < 7; ++a) {
    for (int64_t b = 0; b < 11; ++b) {
      int64_t best = 0;
      for (int64_t r = 1; r < 513; ++r) {
        if (xv[(a * 513 + r) * 11 + b] > xv[(a * 513 + best) * 11 + b]) best = r;
      }
      CHECK(got[a * 11 + b] == best);
    }
  }
}

TEST_CASE("reduce: sum_to undoes broadcasting") {
  ls::Tensor g = iota({2, 3});
  ls::Tensor r = nv::sum_to(g, {3});
  CHECK(r.sizes() == ls::IntList{3});
  CHECK(fv(r) == std::vector<float>{3, 5, 7});
  CHECK(fv(nv::sum_to(g, {2, 1})) == std::vector<float>{3, 12});
  CHECK(nv::sum_to(g, {2, 1}).sizes() == ls::IntList{2, 1});
  CHECK(fv(nv::sum_to(g, {1, 3})) == std::vector<float>{3, 5, 7});
  ls::Tensor s = nv::sum_to(g, {});
  CHECK(s.dim() == 0);
  CHECK(s.item<float>() == 15.0f);
  CHECK(nv::sum_to(g, {2, 3}).is_same(g));  // nothing to sum: grad itself
  ls::Tensor g3 = iota({4, 2, 3});
  ls::Tensor r3 = nv::sum_to(g3, {2, 1});
  CHECK(r3.sizes() == ls::IntList{2, 1});
  std::vector<float> g3v = fv(g3);
  double ref0 = 0, ref1 = 0;
  for (int64_t a = 0; a < 4; ++a) {
    for (int64_t c = 0; c < 3; ++c) {
      ref0 += g3v[(a * 2 + 0) * 3 + c];
      ref1 += g3v[(a * 2 + 1) * 3 + c];
    }
  }
  CHECK(fv(r3) == std::vector<float>{static_cast<float>(ref0), static_cast<float>(ref1)});
  std::string msg = error_of([&] { nv::sum_to(g, {4}); });
  CHECK(msg.find("sum_to") != std::string::npos);
  CHECK(msg.find("[2, 3]") != std::string::npos);
  CHECK(msg.find("[4]") != std::string::npos);
  CHECK_THROWS_AS(nv::sum_to(g, {1, 2, 3, 1}), ls::Error);
}

TEST_CASE("reduce: errors name the op and what went wrong") {
  ls::Tensor a = iota({2, 3});
  std::string msg = error_of([&] { nv::mean(iota({2}, ls::kInt64), {}, false); });
  CHECK(msg.find("mean") != std::string::npos);
  CHECK(msg.find("int64") != std::string::npos);
  msg = error_of([&] { nv::sum(a, {2}, false); });
  CHECK(msg.find("sum") != std::string::npos);
  CHECK(msg.find("out of range") != std::string::npos);
  msg = error_of([&] { nv::sum(a, {1, -1}, false); });
  CHECK(msg.find("more than once") != std::string::npos);
  msg = error_of([&] { nv::max_all(ls::zeros({0})); });
  CHECK(msg.find("max") != std::string::npos);
  CHECK(msg.find("empty") != std::string::npos);
  CHECK_THROWS_AS(nv::min_all(ls::zeros({2, 0})), ls::Error);
  msg = error_of([&] { nv::max_dim(ls::zeros({2, 0}), 1, false); });
  CHECK(msg.find("size 0") != std::string::npos);
  CHECK_THROWS_AS(nv::argmax(a, 3, false), ls::Error);
}
