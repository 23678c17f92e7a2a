// tests/autograd/test_functions_add_relu.cpp — add_relu = relu(a + b): gradcheck of
// the fused op, its node, the same values and gradients as (a + b).relu(), and the
// unfused fallback for broadcasting inputs.
// Read before: autograd/functions/add_relu.cpp.
#include <doctest/doctest.h>

#include <vector>

#include "autograd/node.h"
#include "core/factory.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using ls::testing::away_from_zero;
using ls::testing::randn64;
using Inputs = std::vector<ls::Tensor>;

TEST_CASE("functions: gradcheck of add_relu, fused and broadcasting") {
  ls::manual_seed(70);
  // a + b kept away from the kink: b = 0 plus a moved away from zero, then b varied
  // inside the margin by a small draw.
  ls::Tensor a = away_from_zero(randn64({2, 3, 2}), 0.3);
  ls::Tensor b = randn64({2, 3, 2}) * 0.1;
  CHECK_GRADCHECK([](const Inputs& v) { return ls::add_relu(v[0], v[1]); }, {a, b});
  ls::Tensor row = randn64({2}) * 0.1;  // (2) broadcasts against (2, 3, 2): the unfused path
  CHECK_GRADCHECK([](const Inputs& v) { return ls::add_relu(v[0], v[1]); }, {a, row});
}

TEST_CASE("functions: add_relu records AddReluBackward and matches (a + b).relu()") {
  ls::manual_seed(71);
  ls::Tensor a0 = randn64({3, 4, 5}), b0 = randn64({3, 4, 5}), gy = randn64({3, 4, 5});
  std::vector<double> out[2], ga[2], gb[2];
  for (int fused = 0; fused < 2; ++fused) {
    ls::Tensor a = a0.clone(), b = b0.clone();
    a.requires_grad_(true);
    b.requires_grad_(true);
    ls::Tensor y = fused ? ls::add_relu(a, b) : (a + b).relu();
    REQUIRE(y.grad_fn() != nullptr);
    CHECK(y.grad_fn()->name() == (fused ? "AddReluBackward" : "ReluBackward"));
    (y * gy).sum().backward();
    out[fused] = y.to_vector<double>();
    ga[fused] = a.grad().to_vector<double>();
    gb[fused] = b.grad().to_vector<double>();
  }
  CHECK(out[1] == out[0]);
  CHECK(ga[1] == ga[0]);
  CHECK(gb[1] == gb[0]);
  // Only one input wanting a gradient: the other edge is invalid, no gradient made.
  ls::Tensor a = a0.clone(), b = b0.clone();
  a.requires_grad_(true);
  ls::Tensor y = ls::add_relu(a, b);
  REQUIRE(y.grad_fn() != nullptr);
  CHECK_FALSE(y.grad_fn()->next_edges()[1].is_valid());
  y.sum().backward();
  CHECK(a.grad().defined());
  CHECK_FALSE(b.grad().defined());
}
