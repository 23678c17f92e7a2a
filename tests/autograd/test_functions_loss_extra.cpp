// tests/autograd/test_functions_loss_extra.cpp — nll_loss, binary_cross_entropy,
// binary_cross_entropy_with_logits and smooth_l1_loss (core/losses.h): values
// from their formulas written here with doubles, every reduction, ignore_index,
// the exact gradient of the logits form at 0, gradchecks, float32 under autocast.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/autocast.h"
#include "core/factory.h"
#include "core/losses.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using ls::testing::randn64;
using Inputs = std::vector<ls::Tensor>;

TEST_CASE("losses: nll_loss of log_softmax is cross_entropy, reductions, ignore_index") {
  ls::manual_seed(51);
  ls::Tensor logits = randn64({4, 3});
  ls::Tensor target = ls::tensor(std::vector<int64_t>{2, 0, 1, 2}, {4});
  ls::Tensor lp = logits.log_softmax(1);
  CHECK(ls::allclose(ls::nll_loss(lp, target), ls::cross_entropy(logits, target), 1e-12, 1e-12));
  const std::vector<double> l = lp.to_vector<double>();
  const std::vector<double> each = {-l[2], -l[3], -l[7], -l[11]};
  CHECK(ls::nll_loss(lp, target, ls::kNone).to_vector<double>() == each);
  CHECK(ls::nll_loss(lp, target, ls::kSum).item<double>() == doctest::Approx(each[0] + each[1] + each[2] + each[3]));
  ls::Tensor ignored = ls::tensor(std::vector<int64_t>{2, -100, 1, -100}, {4});
  CHECK(ls::nll_loss(lp, ignored).item<double>() == doctest::Approx((each[0] + each[2]) / 2));
  CHECK(ls::nll_loss(lp, ignored, ls::kNone).to_vector<double>() == std::vector<double>{each[0], 0, each[2], 0});
  CHECK(ls::allclose(ls::nll_loss(lp, ignored), ls::cross_entropy(logits, ignored), 1e-12, 1e-12));
  CHECK_GRADCHECK([&](const Inputs& v) { return ls::nll_loss(v[0], ignored); }, {lp});
  CHECK_THROWS_WITH_AS(ls::nll_loss(lp, ls::tensor(std::vector<int64_t>{3, 0, 0, 0}, {4})),
                       doctest::Contains("targets must be in [0, 3)"), ls::Error);
}

TEST_CASE("losses: binary_cross_entropy and the logits form agree, values, the logits form is stable") {
  ls::Tensor x = ls::tensor(std::vector<double>{-3.0, -0.5, 0.0, 2.0}, {4});
  ls::Tensor y = ls::tensor(std::vector<double>{0.0, 1.0, 0.5, 1.0}, {4});
  std::vector<double> expect;
  const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  for (size_t i = 0; i < 4; ++i) {
    const double p = 1 / (1 + std::exp(-xv[i]));
    expect.push_back(-(yv[i] * std::log(p) + (1 - yv[i]) * std::log(1 - p)));
  }
  CHECK(ls::allclose(ls::binary_cross_entropy_with_logits(x, y, ls::kNone), ls::tensor(expect, {4}), 1e-12, 1e-12));
  CHECK(ls::allclose(ls::binary_cross_entropy(x.sigmoid(), y, ls::kNone), ls::tensor(expect, {4}), 1e-12, 1e-12));
  CHECK(ls::binary_cross_entropy_with_logits(x, y).item<double>() ==
        doctest::Approx((expect[0] + expect[1] + expect[2] + expect[3]) / 4));
  // Large logits: no overflow; p = 0 or 1 in the probability form clamps each log at -100.
  ls::Tensor big = ls::tensor(std::vector<double>{-800.0, 800.0}, {2});
  ls::Tensor ones = ls::tensor(std::vector<double>{1.0, 0.0}, {2});
  CHECK(ls::binary_cross_entropy_with_logits(big, ones, ls::kNone).to_vector<double>() ==
        std::vector<double>{800.0, 800.0});
  CHECK(ls::binary_cross_entropy(ls::tensor(std::vector<double>{0.0, 1.0}, {2}), ones, ls::kSum).item<double>() == 200.0);
  CHECK_THROWS_WITH_AS(ls::binary_cross_entropy(x, y), doctest::Contains("with_logits"), ls::Error);
}

TEST_CASE("losses: the logits form's gradient is sigmoid(x) - y, also at x = 0, gradchecks") {
  ls::Tensor x = ls::tensor(std::vector<double>{0.0, 1.5}, {2}, ls::TensorOptions().dtype(ls::kFloat64).requires_grad(true));
  ls::Tensor y = ls::tensor(std::vector<double>{1.0, 0.0}, {2});
  ls::binary_cross_entropy_with_logits(x, y, ls::kSum).backward();
  const std::vector<double> g = x.grad().to_vector<double>();
  CHECK(g[0] == doctest::Approx(-0.5));
  CHECK(g[1] == doctest::Approx(1 / (1 + std::exp(-1.5))));
  ls::manual_seed(52);
  ls::Tensor xs = randn64({2, 3});
  ls::Tensor ys = ls::rand({2, 3}, ls::TensorOptions().dtype(ls::kFloat64));
  CHECK_GRADCHECK([](const Inputs& v) { return ls::binary_cross_entropy_with_logits(v[0], v[1]); }, {xs, ys});
  CHECK_GRADCHECK([](const Inputs& v) { return ls::binary_cross_entropy(v[0].sigmoid(), v[1], ls::kNone); },
                  {xs, ys});
}

TEST_CASE("losses: smooth_l1_loss values on both sides of beta, reductions, gradcheck") {
  ls::Tensor a = ls::tensor(std::vector<double>{0.0, 0.5, 3.0, -2.0}, {4});
  ls::Tensor b = ls::zeros({4}, ls::TensorOptions().dtype(ls::kFloat64));
  // beta 1: 0, 0.5 * 0.25, 3 - 0.5, 2 - 0.5
  CHECK(ls::smooth_l1_loss(a, b, ls::kNone).to_vector<double>() == std::vector<double>{0.0, 0.125, 2.5, 1.5});
  CHECK(ls::smooth_l1_loss(a, b, ls::kSum).item<double>() == doctest::Approx(4.125));
  CHECK(ls::smooth_l1_loss(a, b, ls::kMean, 2.0).to_vector<double>()[0] ==
        doctest::Approx((0.0 + 0.0625 + 2.0 + 1.0) / 4));
  CHECK(ls::smooth_l1_loss(a, b, ls::kSum, 0.0).item<double>() == doctest::Approx(5.5));  // plain L1
  ls::manual_seed(53);
  ls::Tensor x = randn64({2, 3}) * 2.0, t = randn64({2, 3});
  CHECK_GRADCHECK([](const Inputs& v) { return ls::smooth_l1_loss(v[0], v[1], ls::kNone); }, {x, t});
  CHECK_THROWS_WITH_AS(ls::smooth_l1_loss(a, ls::zeros({3})), doctest::Contains("same shape"), ls::Error);
}

TEST_CASE("losses: float32 under bf16 autocast") {
  ls::Tensor x = ls::randn({4, 3}).to(ls::kBFloat16);
  ls::Tensor y = ls::rand({4, 3}).to(ls::kBFloat16);
  ls::AutocastGuard amp(ls::kBFloat16);
  CHECK(ls::binary_cross_entropy_with_logits(x, y).dtype() == ls::kFloat32);
  CHECK(ls::smooth_l1_loss(x, y).dtype() == ls::kFloat32);
  CHECK(ls::nll_loss(x, ls::tensor(std::vector<int64_t>{0, 1, 2, 0}, {4})).dtype() == ls::kFloat32);
}

TEST_CASE("losses: nll_loss with class weights follows PyTorch's rule, also with ignore_index, gradcheck") {
  // log_probs (3, 2), targets 0, 1, -100 (ignored), weights (2.0, 0.5):
  // sum = 2.0 * 1 + 0.5 * 4 = 4.0; mean = 4.0 / (2.0 + 0.5).
  ls::Tensor lp = ls::tensor(std::vector<float>{-1.0f, -3.0f, -2.0f, -4.0f, -5.0f, -6.0f}, {3, 2});
  ls::Tensor y = ls::tensor(std::vector<int64_t>{0, 1, -100}, {3});
  ls::Tensor w = ls::tensor(std::vector<float>{2.0f, 0.5f}, {2});
  CHECK(ls::nll_loss(lp, y, w, ls::kSum).item<double>() == doctest::Approx(4.0));
  CHECK(ls::nll_loss(lp, y, w, ls::kMean).item<double>() == doctest::Approx(4.0 / 2.5));
  ls::Tensor none = ls::nll_loss(lp, y, w, ls::kNone);
  CHECK(none.to_vector<float>() == std::vector<float>{2.0f, 2.0f, 0.0f});
  CHECK(ls::nll_loss(lp, y, ls::Tensor(), ls::kMean).item<double>() == doctest::Approx(2.5));  // {}: unweighted
  CHECK_THROWS(ls::nll_loss(lp, y, ls::tensor(std::vector<float>{1.0f, 2.0f, 3.0f}, {3})));
  ls::Tensor y2 = ls::tensor(std::vector<int64_t>{1, 0, 1}, {3});
  ls::Tensor w64 = w.to(ls::kFloat64);
  const auto r = ls::testing::gradcheck([&](const Inputs& x) { return ls::nll_loss(x[0], y2, w64, ls::kMean); },
                                        {randn64({3, 2})});
  CHECK_MESSAGE(r.ok, r.message);
}
