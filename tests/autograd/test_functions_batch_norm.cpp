// tests/autograd/test_functions_batch_norm.cpp — batch_norm: gradchecks in
// training mode (through the batch statistics) and in eval mode, w.r.t. input,
// weight and bias, with and without the affine parameters; running statistics
// get no gradient.
#include <doctest/doctest.h>

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
