// tests/core/test_loss.cpp — native cross_entropy and mse_loss, forward and backward.
//
// cross_entropy is compared with -log(softmax(x)[t]) averaged over the rows whose
// target is not ignore_index, on logits large enough to overflow a naive exp;
// ignored rows get zero gradient; all rows ignored gives a NaN loss (as PyTorch
// 1.13) and a zero gradient; bad targets name the value and C. mse_loss is
// compared with its definition.
// Read before: core/native/loss.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "core/native/nn_kernels_transformer.h"
#include "core/rng.h"

namespace ls = lockstep;
namespace native = lockstep::native;
using ls::Tensor;

namespace {

// softmax of row r of a (n, c) row-major array, computed in long double.
std::vector<double> softmax_row(const std::vector<double>& x, int64_t r, int64_t c) {
  long double m = x[r * c], s = 0;
  for (int64_t j = 0; j < c; ++j) m = std::max<long double>(m, x[r * c + j]);
  for (int64_t j = 0; j < c; ++j) s += std::exp(static_cast<long double>(x[r * c + j]) - m);
  std::vector<double> p;
  for (int64_t j = 0; j < c; ++j) {
    p.push_back(static_cast<double>(std::exp(static_cast<long double>(x[r * c + j]) - m) / s));
  }
  return p;
}

}  // namespace

TEST_CASE("cross_entropy: forward is the mean of -log softmax[target] over kept rows") {
  ls::manual_seed(31);
  const int64_t n = 5, c = 4;
  Tensor logits = native::binary_scalar(native::BinaryOp::Mul, ls::randn({n, c}, ls::kFloat64),
                                        50.0);  // large: exp(x) alone would overflow f32
  Tensor target = ls::tensor(std::vector<int64_t>{2, -100, 0, 3, -100});
  auto [loss, log_probs] = native::cross_entropy_forward(logits, target, -100);
  CHECK(loss.dim() == 0);
  CHECK(log_probs.sizes() == ls::IntList{n, c});
  const std::vector<double> x = logits.to_vector<double>();
  const std::vector<int64_t> t = target.to_vector<int64_t>();
  double sum = 0;
  int count = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (t[r] == -100) continue;
    sum -= std::log(softmax_row(x, r, c)[t[r]]);
    ++count;
  }
  CHECK(loss.item<double>() == doctest::Approx(sum / count).epsilon(1e-12));

  // float32 gives the same value to float precision, with no overflow.
  auto [loss32, lp32] =
      native::cross_entropy_forward(native::to_dtype(logits, ls::kFloat32), target, -100);
  CHECK(std::isfinite(loss32.item<double>()));
  CHECK(loss32.item<double>() == doctest::Approx(sum / count).epsilon(1e-5));
}

TEST_CASE("cross_entropy: backward is (softmax - onehot) / count with zero ignored rows") {
  ls::manual_seed(32);
  const int64_t n = 4, c = 3;
  Tensor logits = ls::randn({n, c}, ls::kFloat64);
  Tensor target = ls::tensor(std::vector<int64_t>{1, 7, 0, 2});  // 7 is the ignore_index here
  auto [loss, log_probs] = native::cross_entropy_forward(logits, target, 7);
  Tensor g = ls::scalar_tensor(2.0, ls::kFloat64);
  Tensor dx = native::cross_entropy_backward(g, log_probs, target, 7);
  const std::vector<double> x = logits.to_vector<double>(), dxv = dx.to_vector<double>();
  const std::vector<int64_t> t = target.to_vector<int64_t>();
  for (int64_t r = 0; r < n; ++r) {
    std::vector<double> p = softmax_row(x, r, c);
    for (int64_t j = 0; j < c; ++j) {
      double expected = t[r] == 7 ? 0.0 : (p[j] - (j == t[r] ? 1.0 : 0.0)) * 2.0 / 3.0;
      CHECK(dxv[r * c + j] == doctest::Approx(expected).epsilon(1e-12));
    }
  }
}

TEST_CASE("cross_entropy: every target ignored gives NaN and a zero gradient, like PyTorch") {
  Tensor logits = ls::randn({3, 4});
  Tensor target = ls::full({3}, -100, ls::kInt64);
  auto [loss, log_probs] = native::cross_entropy_forward(logits, target, -100);
  CHECK(std::isnan(loss.item<double>()));
  Tensor dx = native::cross_entropy_backward(ls::scalar_tensor(1.0), log_probs, target, -100);
  for (float v : dx.to_vector<float>()) CHECK(v == 0.0f);
}

TEST_CASE("cross_entropy: errors name the bad target, C and the shapes") {
  Tensor logits = ls::zeros({3, 4});
  CHECK_THROWS_WITH_AS(
      native::cross_entropy_forward(logits, ls::tensor(std::vector<int64_t>{0, 4, 1}), -100),
      doctest::Contains("cross_entropy: target 4 (at position 1) is out of bounds for C = 4 "
                        "classes"),
      ls::Error);
  CHECK_THROWS_WITH_AS(
      native::cross_entropy_forward(logits, ls::tensor(std::vector<int64_t>{0, -1, 1}), -100),
      doctest::Contains("target -1"), ls::Error);
  CHECK_THROWS_WITH_AS(
      native::cross_entropy_forward(logits, ls::tensor(std::vector<int64_t>{0, 1}), -100),
      doctest::Contains("cross_entropy: target [2] must have shape [N] for logits [3, 4]"),
      ls::Error);
  CHECK_THROWS_WITH_AS(
      native::cross_entropy_forward(logits, ls::tensor(std::vector<int32_t>{0, 1, 2}), -100),
      doctest::Contains("cross_entropy: target must hold int64 class indices, got int32"),
      ls::Error);
  CHECK_THROWS_WITH_AS(
      native::cross_entropy_forward(ls::zeros({4}), ls::tensor(std::vector<int64_t>{0}), -100),
      doctest::Contains("cross_entropy: logits must be 2-d (N, C), got [4]"), ls::Error);
}

TEST_CASE("mse_loss: forward is mean((x - y)^2), backward 2 (x - y) g / n") {
  ls::manual_seed(33);
  Tensor x = ls::randn({3, 5}, ls::kFloat64);
  Tensor y = ls::randn({3, 5}, ls::kFloat64);
  const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  double sum = 0;
  for (size_t i = 0; i < xv.size(); ++i) sum += (xv[i] - yv[i]) * (xv[i] - yv[i]);
  Tensor loss = native::mse_loss_forward(x, y);
  CHECK(loss.dim() == 0);
  CHECK(loss.item<double>() == doctest::Approx(sum / 15).epsilon(1e-12));
  const std::vector<double> dx =
      native::mse_loss_backward(ls::scalar_tensor(3.0, ls::kFloat64), x, y).to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) {
    CHECK(dx[i] == doctest::Approx(2 * (xv[i] - yv[i]) * 3.0 / 15).epsilon(1e-12));
  }
  CHECK_THROWS_WITH_AS(native::mse_loss_forward(x, ls::zeros({5, 3}, ls::kFloat64)),
                       doctest::Contains("mse_loss: input [3, 5] and target [5, 3] must have the "
                                         "same shape"),
                       ls::Error);
  CHECK_THROWS_WITH_AS(native::mse_loss_forward(x, ls::zeros({3, 5})),
                       doctest::Contains("must have the same floating dtype"), ls::Error);
}
