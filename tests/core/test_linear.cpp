// tests/core/test_linear.cpp — native::linear_forward / linear_backward against naive loops.
//
// `naive_linear` spells out y[r, o] = sum_i x[r, i] w[o, i] + b[o] on doubles; the
// forward (with and without bias, 1-d / 2-d / 3-d input, non-contiguous operands,
// f32 and f64, an empty batch) and the three backward formulas are compared with
// it. Errors must name the op and the shapes or dtypes at fault.
// Read before: core/native/linear.cpp.
#include <doctest/doctest.h>

#include <vector>

#include "core/error.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "core/native/nn_kernels_transformer.h"
#include "core/rng.h"
#include "core/shape.h"

namespace ls = lockstep;
namespace native = lockstep::native;
using ls::Tensor;

namespace {

// y (rows, out) = x (rows, in) w^T + b, as a flat row-major vector.
std::vector<double> naive_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t in = w.size(1), out = w.size(0), rows = x.numel() / in;
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>();
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double s = b.defined() ? bv[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) s += xv[r * in + i] * wv[o * in + i];
      y[r * out + o] = s;
    }
  }
  return y;
}

void check_close(const Tensor& actual, const std::vector<double>& expected, double tol) {
  const std::vector<double> a = actual.to_vector<double>();
  REQUIRE(a.size() == expected.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(a[i] == doctest::Approx(expected[i]).epsilon(tol).scale(1.0));
  }
}

}  // namespace

TEST_CASE("linear: forward matches x W^T + b for any leading dims, f32 and f64") {
  ls::manual_seed(1);
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
    const double tol = dtype == ls::kFloat32 ? 1e-5 : 1e-12;
    Tensor w = ls::randn({4, 5}, dtype);
    Tensor b = ls::randn({4}, dtype);
    for (const ls::IntList& sizes : {ls::IntList{5}, ls::IntList{3, 5}, ls::IntList{2, 3, 5}}) {
      CAPTURE(ls::shape_str(sizes));
      Tensor x = ls::randn(sizes, dtype);
      ls::IntList out_sizes = sizes;
      out_sizes.back() = 4;
      Tensor y = native::linear_forward(x, w, b);
      CHECK(y.sizes() == out_sizes);
      CHECK(y.dtype() == dtype);
      check_close(y, naive_linear(x, w, b), tol);
      check_close(native::linear_forward(x, w, Tensor()), naive_linear(x, w, Tensor()), tol);
    }
  }
}

TEST_CASE("linear: forward reads non-contiguous input and weight") {
  ls::manual_seed(2);
  Tensor x = native::transpose(ls::randn({6, 3}), 0, 1);  // (3, 6), strided
  Tensor w = native::transpose(ls::randn({6, 2}), 0, 1);  // (2, 6), strided
  Tensor b = native::select(ls::randn({2, 3}), 1, 0);     // (2), stride 3
  check_close(native::linear_forward(x, w, b), naive_linear(x, w, b), 1e-5);
}

TEST_CASE("linear: backward gives G W, G^T X and the column sums of G") {
  ls::manual_seed(3);
  Tensor x = ls::randn({2, 3, 5}, ls::kFloat64);
  Tensor w = ls::randn({4, 5}, ls::kFloat64);
  Tensor g = ls::randn({2, 3, 4}, ls::kFloat64);
  auto [dx, dw, db] = native::linear_backward(g, x, w, true, true, true);
  REQUIRE(dx.sizes() == x.sizes());
  REQUIRE(dw.sizes() == w.sizes());
  REQUIRE(db.sizes() == ls::IntList{4});
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(),
                            gv = g.to_vector<double>();
  std::vector<double> ex(30, 0.0), ew(20, 0.0), eb(4, 0.0);
  for (int r = 0; r < 6; ++r) {
    for (int o = 0; o < 4; ++o) {
      eb[o] += gv[r * 4 + o];
      for (int i = 0; i < 5; ++i) {
        ex[r * 5 + i] += gv[r * 4 + o] * wv[o * 5 + i];
        ew[o * 5 + i] += gv[r * 4 + o] * xv[r * 5 + i];
      }
    }
  }
  check_close(dx, ex, 1e-12);
  check_close(dw, ew, 1e-12);
  check_close(db, eb, 1e-12);
  // Gradients that are not asked for are not computed.
  auto [dx2, dw2, db2] = native::linear_backward(g, Tensor(), w, true, false, false);
  CHECK(dx2.defined());
  CHECK_FALSE(dw2.defined());
  CHECK_FALSE(db2.defined());
}

TEST_CASE("linear: an empty batch gives an empty output and zero weight gradient") {
  Tensor x = ls::zeros({0, 3});
  Tensor w = ls::ones({2, 3});
  Tensor b = ls::ones({2});
  Tensor y = native::linear_forward(x, w, b);
  CHECK(y.sizes() == ls::IntList{0, 2});
  auto [dx, dw, db] = native::linear_backward(ls::zeros({0, 2}), x, w, true, true, true);
  CHECK(dx.sizes() == ls::IntList{0, 3});
  for (float v : dw.to_vector<float>()) CHECK(v == 0.0f);
  for (float v : db.to_vector<float>()) CHECK(v == 0.0f);
}

TEST_CASE("linear: errors name the op and the shapes or dtypes at fault") {
  Tensor w = ls::zeros({4, 5});
  CHECK_THROWS_WITH_AS(
      native::linear_forward(ls::zeros({2, 3}), w, Tensor()),
      doctest::Contains("linear: input [2, 3] has in_features 3 but weight [4, 5]"), ls::Error);
  CHECK_THROWS_WITH_AS(native::linear_forward(ls::zeros({2, 5}, ls::kFloat64), w, Tensor()),
                       doctest::Contains("must have the same floating dtype"), ls::Error);
  CHECK_THROWS_WITH_AS(native::linear_forward(ls::zeros({2, 5}), w, ls::zeros({3})),
                       doctest::Contains("linear: bias must have shape [4]"), ls::Error);
  CHECK_THROWS_WITH_AS(native::linear_forward(ls::zeros({2, 5}), ls::zeros({5}), Tensor()),
                       doctest::Contains("linear: weight must be 2-d"), ls::Error);
  CHECK_THROWS_WITH_AS(native::linear_forward(ls::zeros({}), w, Tensor()),
                       doctest::Contains("linear: input must have at least 1 dim"), ls::Error);
}
