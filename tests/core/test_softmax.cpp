// tests/core/test_softmax.cpp — softmax/log_softmax against the direct formula, over
// any dim, stability for large inputs, and both backward formulas against central
// differences.
#include <doctest/doctest.h>

#include <cmath>
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
// softmax of x (float64, shape (A, R, B)) over the middle dim, straight from the formula.
std::vector<double> softmax_ref(const std::vector<double>& x, int64_t A, int64_t R, int64_t B) {
  std::vector<double> y(x.size());
  for (int64_t a = 0; a < A; ++a) {
    for (int64_t b = 0; b < B; ++b) {
      double s = 0;
      for (int64_t r = 0; r < R; ++r) s += std::exp(x[(a * R + r) * B + b]);
      for (int64_t r = 0; r < R; ++r) y[(a * R + r) * B + b] = std::exp(x[(a * R + r) * B + b]) / s;
    }
  }
  return y;
}
}  // namespace

TEST_CASE("softmax: every dim of a 3-d tensor matches the formula, rows sum to 1") {
  const int64_t d0 = 2, d1 = 3, d2 = 4;
  ls::Tensor x = ls::randn({d0, d1, d2}, ls::kFloat64);
  std::vector<double> xv = x.to_vector<double>();
  const int64_t A[] = {1, d0, d0 * d1}, R[] = {d0, d1, d2}, B[] = {d1 * d2, d2, 1};
  for (int64_t dim = 0; dim < 3; ++dim) {
    CAPTURE(dim);
    std::vector<double> ref = softmax_ref(xv, A[dim], R[dim], B[dim]);
    ls::Tensor y = nv::softmax(x, dim);
    CHECK(y.sizes() == x.sizes());
    std::vector<double> yv = y.to_vector<double>();
    std::vector<double> lv = nv::log_softmax(x, dim - 3).to_vector<double>();  // negative dim
    for (size_t k = 0; k < xv.size(); ++k) {
      CHECK(yv[k] == doctest::Approx(ref[k]).epsilon(1e-13));
      CHECK(lv[k] == doctest::Approx(std::log(ref[k])).epsilon(1e-13));
    }
    std::vector<double> sums = nv::sum(y, {dim}, false).to_vector<double>();
    for (double s : sums) CHECK(s == doctest::Approx(1.0).epsilon(1e-14));
  }
}

TEST_CASE("softmax: large inputs do not overflow, non-contiguous inputs work") {
  ls::Tensor x = ls::tensor(std::vector<float>{1000, 1001, 1002, -1000, -1001, -1002}, {2, 3});
  std::vector<float> y = nv::softmax(x, 1).to_vector<float>();
  std::vector<double> ref = softmax_ref({0, 1, 2, 2, 1, 0}, 2, 3, 1);  // shift-invariant
  for (size_t k = 0; k < 6; ++k) CHECK(y[k] == doctest::Approx(ref[k]).epsilon(1e-6));
  std::vector<float> l = nv::log_softmax(x, 1).to_vector<float>();
  for (size_t k = 0; k < 6; ++k) CHECK(l[k] == doctest::Approx(std::log(ref[k])).epsilon(1e-6));

  ls::Tensor t = nv::transpose(ls::randn({5, 4}), 0, 1);  // (4, 5), non-contiguous
  std::vector<float> tv = nv::softmax(t, 1).to_vector<float>();
  std::vector<float> cv = nv::softmax(nv::contiguous(t), 1).to_vector<float>();
  CHECK(tv == cv);
  ls::Tensor s = nv::softmax(ls::scalar_tensor(3.0), 0);  // 0-d: a row of one
  CHECK(s.item<float>() == 1.0f);
}

TEST_CASE("softmax: many rows take the parallel path") {
  const int saved = ls::get_num_threads();
  ls::set_num_threads(4);
  ls::Tensor x = ls::randn({512, 1000});
  std::vector<float> y = nv::softmax(x, -1).to_vector<float>();
  std::vector<float> xv = x.to_vector<float>();
  for (int64_t r = 0; r < 512; r += 37) {
    double s = 0, m = -1e30;
    for (int64_t j = 0; j < 1000; ++j) m = std::max<double>(m, xv[r * 1000 + j]);
    for (int64_t j = 0; j < 1000; ++j) s += std::exp(xv[r * 1000 + j] - m);
    double total = 0;
    for (int64_t j = 0; j < 1000; ++j) {
      CHECK(y[r * 1000 + j] == doctest::Approx(std::exp(xv[r * 1000 + j] - m) / s).epsilon(1e-5));
      total += y[r * 1000 + j];
    }
    CHECK(total == doctest::Approx(1.0).epsilon(1e-5));
  }
  ls::set_num_threads(saved);
}

TEST_CASE("softmax: backward formulas match central differences") {
  // L(x) = sum(g * f(x)); dL/dx from the backward kernel vs (L(x+h) - L(x-h)) / 2h.
  const int64_t rows = 3, cols = 4;
  for (int64_t dim : {1, 0}) {
    for (bool log : {false, true}) {
      CAPTURE(dim);
      CAPTURE(log);
      ls::Tensor x = ls::randn({rows, cols}, ls::kFloat64);
      ls::Tensor g = ls::randn({rows, cols}, ls::kFloat64);
      auto f = [&](const ls::Tensor& in) { return log ? nv::log_softmax(in, dim) : nv::softmax(in, dim); };
      auto loss = [&](const ls::Tensor& in) {
        return nv::sum(nv::binary(nv::BinaryOp::Mul, g, f(in)), {}, false).item<double>();
      };
      ls::Tensor y = f(x);
      ls::Tensor gi = log ? nv::log_softmax_backward(g, y, dim) : nv::softmax_backward(g, y, dim);
      std::vector<double> giv = gi.to_vector<double>();
      const double h = 1e-6;
      for (int64_t k = 0; k < rows * cols; ++k) {
        ls::Tensor xp = nv::clone(x), xm = nv::clone(x);
        xp.data_ptr<double>()[k] += h;
        xm.data_ptr<double>()[k] -= h;
        CHECK(giv[k] == doctest::Approx((loss(xp) - loss(xm)) / (2 * h)).epsilon(1e-7));
      }
    }
  }
}

TEST_CASE("softmax: errors") {
  std::string msg = error_of([] { nv::softmax(ls::tensor(std::vector<int64_t>{1, 2}, {2}), 0); });
  CHECK(msg.find("softmax") != std::string::npos);
  CHECK(msg.find("int64") != std::string::npos);
  msg = error_of([] { nv::log_softmax(ls::zeros({2, 3}), 2); });
  CHECK(msg.find("log_softmax") != std::string::npos);
  CHECK(msg.find("out of range") != std::string::npos);
  msg = error_of([] { nv::softmax_backward(ls::zeros({2, 3}), ls::zeros({3, 2}), 1); });
  CHECK(msg.find("softmax_backward") != std::string::npos);
  CHECK(msg.find("[2, 3]") != std::string::npos);
}
