// tests/core/test_layer_norm.cpp — native::layer_norm_forward / backward against the formulas.
//
// Each row of D = prod(normalized_shape) trailing elements is normalised with its
// own mean and biased variance; the forward (1 and 2 normalised dims, with and
// without weight/bias), the saved statistics, accuracy for rows with a large
// mean, and the backward (against a naive per-row evaluation of the standard
// formula) are checked. Errors name the op and the shapes.
// Read before: core/native/layer_norm.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "core/native/nn_kernels_transformer.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/shape.h"

namespace ls = lockstep;
namespace native = lockstep::native;
using ls::Tensor;

namespace {

struct RowStats {
  double mean, rstd;
};

RowStats stats(const std::vector<double>& x, int64_t row, int64_t d, double eps) {
  double mean = 0, var = 0;
  for (int64_t j = 0; j < d; ++j) mean += x[row * d + j];
  mean /= static_cast<double>(d);
  for (int64_t j = 0; j < d; ++j) var += (x[row * d + j] - mean) * (x[row * d + j] - mean);
  var /= static_cast<double>(d);
  return {mean, 1.0 / std::sqrt(var + eps)};
}

}  // namespace

TEST_CASE("layer_norm: forward normalises each row over the trailing dims") {
  ls::manual_seed(11);
  const double eps = 1e-5;
  for (const ls::IntList& norm : {ls::IntList{4}, ls::IntList{3, 4}}) {
    CAPTURE(ls::shape_str(norm));
    Tensor x = ls::randn({2, 3, 4}, ls::kFloat64);
    Tensor w = ls::randn(norm, ls::kFloat64);
    Tensor b = ls::randn(norm, ls::kFloat64);
    const int64_t d = norm.size() == 1 ? 4 : 12, m = 24 / d;
    const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(),
                              bv = b.to_vector<double>();
    for (bool affine : {true, false}) {
      CAPTURE(affine);
      auto [y, mean, rstd] =
          native::layer_norm_forward(x, norm, affine ? w : Tensor(), affine ? b : Tensor(), eps);
      CHECK(y.sizes() == x.sizes());
      CHECK(mean.sizes() == ls::IntList{m});
      CHECK(rstd.sizes() == ls::IntList{m});
      const std::vector<double> yv = y.to_vector<double>(), mv = mean.to_vector<double>(),
                                rv = rstd.to_vector<double>();
      for (int64_t r = 0; r < m; ++r) {
        RowStats s = stats(xv, r, d, eps);
        CHECK(mv[r] == doctest::Approx(s.mean).epsilon(1e-12));
        CHECK(rv[r] == doctest::Approx(s.rstd).epsilon(1e-12));
        for (int64_t j = 0; j < d; ++j) {
          double xhat = (xv[r * d + j] - s.mean) * s.rstd;
          double expected = affine ? xhat * wv[j] + bv[j] : xhat;
          CHECK(yv[r * d + j] == doctest::Approx(expected).epsilon(1e-12));
        }
      }
    }
  }
}

TEST_CASE("layer_norm: float32 rows with a large mean keep their small variance") {
  // x = 1e4 + {-1, 1, -1, 1}: mean 1e4, variance 1. A one-pass E[x^2] - E[x]^2 in
  // float would lose the variance to cancellation; the two-pass double sums do not.
  Tensor x = ls::tensor(std::vector<float>{9999, 10001, 9999, 10001}, {1, 4});
  auto [y, mean, rstd] = native::layer_norm_forward(x, {4}, Tensor(), Tensor(), 0.0);
  CHECK(mean.item<double>() == doctest::Approx(1e4));
  CHECK(rstd.item<double>() == doctest::Approx(1.0).epsilon(1e-6));
  const std::vector<float> yv = y.to_vector<float>();
  CHECK(yv[0] == doctest::Approx(-1.0).epsilon(1e-5));
  CHECK(yv[1] == doctest::Approx(1.0).epsilon(1e-5));
}

TEST_CASE("layer_norm: backward matches the standard formula per row") {
  ls::manual_seed(12);
  const double eps = 1e-5;
  const int64_t m = 3, d = 5;
  Tensor x = ls::randn({m, d}, ls::kFloat64);
  Tensor w = ls::randn({d}, ls::kFloat64);
  Tensor b = ls::randn({d}, ls::kFloat64);
  Tensor g = ls::randn({m, d}, ls::kFloat64);
  auto [y, mean, rstd] = native::layer_norm_forward(x, {d}, w, b, eps);
  auto [dx, dw, db] = native::layer_norm_backward(g, x, {d}, mean, rstd, w, true, true, true);
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(),
                            gv = g.to_vector<double>(), dxv = dx.to_vector<double>(),
                            dwv = dw.to_vector<double>(), dbv = db.to_vector<double>();
  std::vector<double> ew(d, 0.0), eb(d, 0.0);
  for (int64_t r = 0; r < m; ++r) {
    RowStats s = stats(xv, r, d, eps);
    double mean_gy = 0, mean_gy_xhat = 0;
    for (int64_t j = 0; j < d; ++j) {
      double xhat = (xv[r * d + j] - s.mean) * s.rstd;
      mean_gy += gv[r * d + j] * wv[j] / d;
      mean_gy_xhat += gv[r * d + j] * wv[j] * xhat / d;
      ew[j] += gv[r * d + j] * xhat;
      eb[j] += gv[r * d + j];
    }
    for (int64_t j = 0; j < d; ++j) {
      double xhat = (xv[r * d + j] - s.mean) * s.rstd;
      double expected = s.rstd * (gv[r * d + j] * wv[j] - mean_gy - xhat * mean_gy_xhat);
      CHECK(dxv[r * d + j] == doctest::Approx(expected).epsilon(1e-10));
    }
  }
  for (int64_t j = 0; j < d; ++j) {
    CHECK(dwv[j] == doctest::Approx(ew[j]).epsilon(1e-12));
    CHECK(dbv[j] == doctest::Approx(eb[j]).epsilon(1e-12));
  }
  // Without affine parameters there is no weight or bias gradient to compute.
  auto [dx2, dw2, db2] =
      native::layer_norm_backward(g, x, {d}, mean, rstd, Tensor(), true, true, false);
  CHECK(dx2.defined());
  CHECK_FALSE(dw2.defined());
  CHECK_FALSE(db2.defined());
}

TEST_CASE("layer_norm: results do not depend on the thread count") {
  // 1024 rows of 64: big enough that rows (forward, grad_input) and column blocks
  // (grad_weight, grad_bias) are split across threads.
  ls::manual_seed(13);
  Tensor x = ls::randn({1024, 64});
  Tensor w = ls::randn({64});
  Tensor b = ls::randn({64});
  Tensor g = ls::randn({1024, 64});
  const int saved_threads = ls::get_num_threads();
  std::vector<Tensor> results[2];
  for (int threads : {1, 2}) {
    ls::set_num_threads(threads);
    auto [y, mean, rstd] = native::layer_norm_forward(x, {64}, w, b, 1e-5);
    auto [dx, dw, db] = native::layer_norm_backward(g, x, {64}, mean, rstd, w, true, true, true);
    results[threads - 1] = {y, mean, rstd, dx, dw, db};
  }
  ls::set_num_threads(saved_threads);
  for (size_t k = 0; k < results[0].size(); ++k) {
    CAPTURE(k);
    CHECK(native::equal(results[0][k], results[1][k]));
  }
}

TEST_CASE("layer_norm: errors name the op and the shapes") {
  Tensor x = ls::zeros({2, 3, 4});
  CHECK_THROWS_WITH_AS(native::layer_norm_forward(x, {3}, Tensor(), Tensor(), 1e-5),
                       doctest::Contains("layer_norm: normalized_shape [3] must be non-empty and "
                                         "equal the trailing dims of the input [2, 3, 4]"),
                       ls::Error);
  CHECK_THROWS_WITH_AS(native::layer_norm_forward(x, {}, Tensor(), Tensor(), 1e-5),
                       doctest::Contains("layer_norm: normalized_shape []"), ls::Error);
  CHECK_THROWS_WITH_AS(native::layer_norm_forward(x, {4}, ls::ones({3}), Tensor(), 1e-5),
                       doctest::Contains("layer_norm: weight has shape [3] but normalized_shape "
                                         "is [4]"),
                       ls::Error);
  CHECK_THROWS_WITH_AS(
      native::layer_norm_forward(x, {4}, Tensor(), ls::ones({4}, ls::kFloat64), 1e-5),
      doctest::Contains("layer_norm: bias dtype float64 differs from input "
                        "dtype float32"),
      ls::Error);
}
