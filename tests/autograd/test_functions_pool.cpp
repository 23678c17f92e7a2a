// tests/autograd/test_functions_pool.cpp — max_pool2d and adaptive_avg_pool2d:
// gradchecks (max_pool2d on inputs without ties, see Note [Kink policy]) and the
// gradient of a hand-worked case.
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
using ls::testing::distinct_values;
using ls::testing::randn64;
using Inputs = std::vector<ls::Tensor>;

TEST_CASE("functions: gradcheck of max_pool2d on inputs without ties") {
  ls::manual_seed(50);
  struct Config {
    IntList kernel, stride, padding;
  };
  const std::vector<Config> configs = {
      {{2}, {2}, {0}}, {{3}, {2}, {1}}, {{2, 3}, {1}, {1, 0}}, {{3}, {1}, {1}}};
  ls::Tensor x = distinct_values({2, 2, 5, 5});
  for (const Config& c : configs) {
    CAPTURE(ls::shape_str(c.kernel));
    CHECK_GRADCHECK(
        [&](const Inputs& v) { return ls::max_pool2d(v[0], c.kernel, c.stride, c.padding); }, {x});
  }
}

TEST_CASE("functions: max_pool2d sends each gradient to its maximum, overlaps add up") {
  // Row 0 1 5 2 3 as a (1, 1, 1, 5) image; kernel (1, 3), stride 1: all three windows
  // have their maximum at position 2, so it receives the whole gradient, 3.
  ls::Tensor x = ls::tensor(std::vector<double>{0, 1, 5, 2, 3}, {1, 1, 1, 5});
  x.requires_grad_(true);
  ls::Tensor y = ls::max_pool2d(x, {1, 3}, {1});
  CHECK(y.grad_fn()->name() == "MaxPool2dBackward");
  y.sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0, 3, 0, 0});
}

TEST_CASE("functions: gradcheck of adaptive_avg_pool2d") {
  ls::manual_seed(51);
  ls::Tensor x = randn64({2, 2, 5, 4});
  for (IntList out : {IntList{1}, IntList{2, 3}, IntList{3}, IntList{5, 4}}) {
    CAPTURE(ls::shape_str(out));
    CHECK_GRADCHECK([&](const Inputs& v) { return ls::adaptive_avg_pool2d(v[0], out); }, {x});
  }
  ls::Tensor z = randn64({1, 2, 3, 3});
  z.requires_grad_(true);
  ls::Tensor y = ls::adaptive_avg_pool2d(z, {1});
  CHECK(y.grad_fn()->name() == "AdaptiveAvgPool2dBackward");
  y.sum().backward();  // the global mean: every pixel gets 1 / 9
  for (double g : z.grad().to_vector<double>()) CHECK(g == doctest::Approx(1.0 / 9));
}
