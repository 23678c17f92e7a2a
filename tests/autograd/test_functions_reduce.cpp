// tests/autograd/test_functions_reduce.cpp — sum, mean, max, min: gradchecks over
// all dims, chosen dims (keepdim or not, negative dims), 0-d inputs; how ties
// share the gradient; forward values.
#include <doctest/doctest.h>

#include <tuple>
#include <vector>

#include "core/factory.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using ls::testing::distinct_values;
using ls::testing::randn64;
using Inputs = std::vector<ls::Tensor>;

TEST_CASE("functions: gradcheck of sum and mean") {
  ls::manual_seed(20);
  ls::Tensor x = randn64({2, 3, 4});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].sum(); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].mean(); }, {x});
  for (bool keepdim : {false, true}) {
    CAPTURE(keepdim);
    CHECK_GRADCHECK([=](const Inputs& v) { return v[0].sum({1}, keepdim); }, {x});
    CHECK_GRADCHECK([=](const Inputs& v) { return v[0].sum({0, 2}, keepdim); }, {x});
    CHECK_GRADCHECK([=](const Inputs& v) { return v[0].sum({-1}, keepdim); }, {x});
    CHECK_GRADCHECK([=](const Inputs& v) { return v[0].mean({1}, keepdim); }, {x});
    CHECK_GRADCHECK([=](const Inputs& v) { return v[0].mean({2, 0}, keepdim); }, {x});
    CHECK_GRADCHECK([=](const Inputs& v) { return v[0].mean({-2, -1}, keepdim); }, {x});
  }
  // A non-contiguous input, and a 0-d one.
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].transpose(0, 2).sum({1}); }, {x});
  ls::Tensor s = randn64({});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].sum(); }, {s});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].mean(); }, {s});
}

TEST_CASE("functions: sum and mean forward values and gradients by hand") {
  ls::Tensor x =
      ls::tensor(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, ls::requires_grad());
  CHECK(x.sum().item<double>() == 21);
  CHECK(x.mean().item<double>() == 3.5);
  CHECK(x.sum({0}).to_vector<double>() == std::vector<double>{5, 7, 9});
  CHECK(x.sum({1}, true).sizes() == ls::IntList{2, 1});
  CHECK(x.mean({1}).to_vector<double>() == std::vector<double>{2, 5});
  x.mean().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>(6, 1.0 / 6));
}

TEST_CASE("functions: gradcheck of max and min away from ties") {
  ls::manual_seed(21);
  ls::Tensor x = distinct_values({3, 4});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].max(); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].min(); }, {x});
  for (bool keepdim : {false, true}) {
    CAPTURE(keepdim);
    for (int64_t dim : {0, 1, -1}) {
      CAPTURE(dim);
      CHECK_GRADCHECK([=](const Inputs& v) { return std::get<0>(v[0].max(dim, keepdim)); }, {x});
      CHECK_GRADCHECK([=](const Inputs& v) { return std::get<0>(v[0].min(dim, keepdim)); }, {x});
    }
  }
  ls::Tensor y = distinct_values({2, 3, 2});
  CHECK_GRADCHECK([](const Inputs& v) { return std::get<0>(v[0].max(1)); }, {y});
  CHECK_GRADCHECK([](const Inputs& v) { return std::get<0>(v[0].permute({2, 0, 1}).min(2)); }, {y});
}

TEST_CASE("functions: max and min forward values, indices are not differentiable") {
  ls::Tensor x =
      ls::tensor(std::vector<double>{1, 7, 3, 9, 2, 4}, {2, 3}, ls::requires_grad());
  CHECK(x.max().item<double>() == 9);
  CHECK(x.min().item<double>() == 1);
  auto [values, indices] = x.max(1);
  CHECK(values.to_vector<double>() == std::vector<double>{7, 9});
  CHECK(indices.to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(values.requires_grad());
  CHECK_FALSE(indices.requires_grad());
  values.sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, 0, 1, 0, 0});
  x.mutable_grad() = ls::Tensor();
  auto [low, low_idx] = x.min(0, /*keepdim=*/true);
  CHECK(low.sizes() == ls::IntList{1, 3});
  CHECK(low.to_vector<double>() == std::vector<double>{1, 2, 3});
  (low * 2.0).sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 0, 2, 0, 2, 0});
}

TEST_CASE("functions: max()/min() over all elements split the gradient evenly among ties") {
  // PyTorch 1.13's evenly_distribute_backward: each of k maxima gets grad / k.
  ls::Tensor x = ls::tensor(std::vector<double>{3, 1, 3, 0, 3, 2}, {2, 3}, ls::requires_grad());
  (x.max() * 6.0).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 0, 2, 0, 2, 0});
  ls::Tensor y = ls::tensor(std::vector<double>{0, 1, 0}, {3}, ls::requires_grad());
  y.min().backward();
  CHECK(y.grad().to_vector<double>() == std::vector<double>{0.5, 0, 0.5});
  // Along a dim, the gradient goes to the element the index names.
  ls::Tensor z = ls::tensor(std::vector<double>{5, 5, 1}, {3}, ls::requires_grad());
  auto [v, i] = z.max(0);
  v.backward();
  std::vector<double> expected(3, 0.0);
  expected[static_cast<size_t>(i.item<int64_t>())] = 1.0;
  CHECK(z.grad().to_vector<double>() == expected);
}
