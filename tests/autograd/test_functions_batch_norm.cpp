// tests/autograd/test_functions_batch_norm.cpp — batch_norm: gradchecks in
// training mode (through the batch statistics) and in eval mode, w.r.t. input,
// weight and bias, with and without the affine parameters; running statistics
// get no gradient. batch_norm_relu (Note [Fused BatchNorm + ReLU]): gradchecks
// in both modes, and the same gradients as batch_norm followed by relu.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/node.h"
#include "core/factory.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using ls::IntList;
using ls::testing::randn64;
using Inputs = std::vector<ls::Tensor>;

TEST_CASE("functions: gradcheck of batch_norm in training mode") {
  ls::manual_seed(60);
  for (IntList sizes : {IntList{4, 3}, IntList{2, 3, 2, 2}}) {
    CAPTURE(ls::shape_str(sizes));
    const int64_t c = sizes[1];
    ls::Tensor x = randn64(sizes), w = randn64({c}), b = randn64({c});
    // The running statistics are updated by every forward but do not affect the output.
    ls::Tensor rm = ls::zeros({c}, ls::kFloat64), rv = ls::ones({c}, ls::kFloat64);
    CHECK_GRADCHECK(
        [&](const Inputs& v) { return ls::batch_norm(v[0], v[1], v[2], rm, rv, true, 0.1, 1e-5); },
        {x, w, b});
    CHECK_GRADCHECK(  // no affine parameters, no running stats
        [&](const Inputs& v) {
          return ls::batch_norm(v[0], ls::Tensor(), ls::Tensor(), ls::Tensor(), ls::Tensor(), true,
                                0.1, 1e-5);
        },
        {x});
  }
}

TEST_CASE("functions: gradcheck of batch_norm in eval mode") {
  ls::manual_seed(61);
  ls::Tensor x = randn64({2, 3, 2, 2}), w = randn64({3}), b = randn64({3});
  ls::Tensor rm = randn64({3}), rv = ls::rand({3}, ls::kFloat64) + 0.5;
  CHECK_GRADCHECK(
      [&](const Inputs& v) { return ls::batch_norm(v[0], v[1], v[2], rm, rv, false, 0.1, 1e-5); },
      {x, w, b});
}

TEST_CASE("functions: batch_norm records BatchNormBackward with edges for input, weight, bias") {
  ls::manual_seed(62);
  ls::Tensor x = randn64({4, 2});
  ls::Tensor w = ls::ones({2}, ls::kFloat64), b = ls::zeros({2}, ls::kFloat64);
  w.requires_grad_(true);
  b.requires_grad_(true);
  ls::Tensor rm = ls::zeros({2}, ls::kFloat64), rv = ls::ones({2}, ls::kFloat64);
  ls::Tensor y = ls::batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5);
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "BatchNormBackward");
  CHECK(y.grad_fn()->next_edges().size() == 3);
  CHECK_FALSE(y.grad_fn()->next_edges()[0].is_valid());
  (y * y).sum().backward();
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(rm.requires_grad());
  REQUIRE(b.grad().defined());
  // d/db sum(y^2) = 2 sum(y) = 0 per channel, since y has zero mean over the batch.
  for (double g : b.grad().to_vector<double>()) CHECK(g == doctest::Approx(0.0).scale(1.0));
  // d/dw sum(y^2) with w = 1, b = 0 is 2 sum(xhat^2) = 2 M var / (var + eps) ~ 2 M.
  for (double g : w.grad().to_vector<double>()) CHECK(g == doctest::Approx(8.0).epsilon(1e-2));
}

namespace {

// Inputs whose batch-norm output keeps |y| >= 0.05, so that the fused ReLU's kink
// stays out of gradcheck's finite differences (Note [Kink policy]); redraws until so.
struct BnInputs {
  ls::Tensor x, w, b, rm, rv;
};

BnInputs bn_inputs_off_kink(const IntList& sizes, bool training) {
  const int64_t c = sizes[1];
  for (int attempt = 0; attempt < 200; ++attempt) {
    BnInputs in{randn64(sizes), randn64({c}), randn64({c}), randn64({c}),
                ls::rand({c}, ls::kFloat64) + 0.5};
    ls::Tensor rm = in.rm.clone(), rv = in.rv.clone();  // this probe must not move the stats
    const std::vector<double> y =
        ls::batch_norm(in.x, in.w, in.b, rm, rv, training, 0.1, 1e-5).to_vector<double>();
    const double closest = std::abs(*std::min_element(
        y.begin(), y.end(), [](double p, double q) { return std::abs(p) < std::abs(q); }));
    if (closest >= 0.05) return in;
  }
  FAIL("no batch-norm input without values near the ReLU kink in 200 draws");
  return {};
}

}  // namespace

TEST_CASE("functions: gradcheck of batch_norm_relu in training and eval mode") {
  ls::manual_seed(63);
  for (bool training : {true, false}) {
    CAPTURE(training);
    BnInputs in = bn_inputs_off_kink({3, 2, 2, 2}, training);
    CHECK_GRADCHECK(
        [&](const Inputs& v) {
          return ls::batch_norm_relu(v[0], v[1], v[2], in.rm, in.rv, training, 0.1, 1e-5);
        },
        {in.x, in.w, in.b});
  }
}

TEST_CASE("functions: batch_norm_relu records BatchNormReluBackward, matching batch_norm + relu") {
  ls::manual_seed(64);
  ls::Tensor x0 = randn64({4, 3, 3, 3}), w0 = randn64({3}), b0 = randn64({3});
  ls::Tensor gy = randn64({4, 3, 3, 3});
  std::vector<std::vector<double>> grads[2];
  std::vector<double> outs[2];
  for (int fused = 0; fused < 2; ++fused) {
    ls::Tensor x = x0.clone(), w = w0.clone(), b = b0.clone();
    for (ls::Tensor* t : {&x, &w, &b}) t->requires_grad_(true);
    ls::Tensor y = fused ? ls::batch_norm_relu(x, w, b, {}, {}, true, 0.1, 1e-5)
                         : ls::batch_norm(x, w, b, {}, {}, true, 0.1, 1e-5).relu();
    REQUIRE(y.grad_fn() != nullptr);
    CHECK(y.grad_fn()->name() == (fused ? "BatchNormReluBackward" : "ReluBackward"));
    (y * gy).sum().backward();
    outs[fused] = y.to_vector<double>();
    for (ls::Tensor* t : {&x, &w, &b}) grads[fused].push_back(t->grad().to_vector<double>());
  }
  CHECK(outs[1] == outs[0]);
  for (size_t k = 0; k < 3; ++k) {
    REQUIRE(grads[1][k].size() == grads[0][k].size());
    for (size_t e = 0; e < grads[0][k].size(); ++e) {
      CHECK(grads[1][k][e] == doctest::Approx(grads[0][k][e]).epsilon(1e-12).scale(1.0));
    }
  }
}

TEST_CASE("functions: batch_norm_add_relu matches add_relu(batch_norm) and passes gradcheck") {
  // Note [Fused BatchNorm + add + ReLU]: forward values, the four gradients and the
  // running statistics against the two ops in turn, in training and eval mode.
  ls::manual_seed(65);
  for (bool training : {true, false}) {
    CAPTURE(training);
    ls::Tensor x0 = randn64({4, 3, 3, 5}), r0 = randn64({4, 3, 3, 5});
    ls::Tensor w0 = randn64({3}), b0 = randn64({3}), gy = randn64({4, 3, 3, 5});
    std::vector<std::vector<double>> grads[2], stats[2];
    std::vector<double> outs[2];
    for (int fused = 0; fused < 2; ++fused) {
      ls::Tensor x = x0.clone(), r = r0.clone(), w = w0.clone(), b = b0.clone();
      ls::Tensor rm = ls::zeros({3}, ls::kFloat64) + 0.5, rv = ls::ones({3}, ls::kFloat64) * 2.0;
      for (ls::Tensor* t : {&x, &r, &w, &b}) t->requires_grad_(true);
      ls::Tensor y = fused ? ls::batch_norm_add_relu(x, r, w, b, rm, rv, training, 0.1, 1e-5)
                           : ls::add_relu(ls::batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5), r);
      REQUIRE(y.grad_fn() != nullptr);
      CHECK(y.grad_fn()->name() == (fused ? "BatchNormAddReluBackward" : "AddReluBackward"));
      (y * gy).sum().backward();
      outs[fused] = y.to_vector<double>();
      for (ls::Tensor* t : {&x, &r, &w, &b}) grads[fused].push_back(t->grad().to_vector<double>());
      stats[fused] = {rm.to_vector<double>(), rv.to_vector<double>()};
    }
    REQUIRE(outs[1].size() == outs[0].size());
    for (size_t e = 0; e < outs[0].size(); ++e) {
      CHECK(outs[1][e] == doctest::Approx(outs[0][e]).epsilon(1e-12).scale(1.0));
    }
    for (size_t k = 0; k < 4; ++k) {
      REQUIRE(grads[1][k].size() == grads[0][k].size());
      for (size_t e = 0; e < grads[0][k].size(); ++e) {
        CHECK(grads[1][k][e] == doctest::Approx(grads[0][k][e]).epsilon(1e-12).scale(1.0));
      }
    }
    CHECK(stats[1] == stats[0]);
  }
  // gradcheck w.r.t. all four inputs, with inputs whose pre-ReLU values stay off the kink.
  for (int attempt = 0;; ++attempt) {
    REQUIRE(attempt < 200);
    ls::Tensor x = randn64({3, 2, 2, 2}), r = randn64({3, 2, 2, 2});
    ls::Tensor w = randn64({2}), b = randn64({2});
    const std::vector<double> pre =
        (ls::batch_norm(x, w, b, {}, {}, true, 0.1, 1e-5) + r).to_vector<double>();
    bool off_kink = true;
    for (double v : pre) off_kink &= std::abs(v) >= 0.05;
    if (!off_kink) continue;
    CHECK_GRADCHECK(
        [&](const Inputs& v) {
          return ls::batch_norm_add_relu(v[0], v[3], v[1], v[2], {}, {}, true, 0.1, 1e-5);
        },
        {x, w, b, r});
    break;
  }
}

TEST_CASE("functions: batch_norm_add_relu names a residual of the wrong shape") {
  ls::Tensor x = ls::randn({2, 3, 4, 4}), r = ls::randn({2, 3, 4, 5});
  CHECK_THROWS_WITH_AS(ls::batch_norm_add_relu(x, r, {}, {}, {}, {}, true, 0.1, 1e-5),
                       doctest::Contains("batch_norm_add_relu: the residual must have the input's shape"),
                       ls::Error);
}
