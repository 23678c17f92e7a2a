// tests/autograd/test_functions_conv.cpp — conv2d: gradchecks w.r.t. input, weight
// and bias for stride, padding, dilation and groups, with and without bias, and
// what gets recorded when only some inputs require grad.
#include <doctest/doctest.h>

#include <vector>

#include "autograd/node.h"
#include "core/factory.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using ls::IntList;
using ls::testing::randn64;
using Inputs = std::vector<ls::Tensor>;

namespace {

struct Config {
  IntList x_sizes, w_sizes, stride, padding, dilation;
  int64_t groups;
};

}  // namespace

TEST_CASE("functions: gradcheck of conv2d w.r.t. input, weight and bias") {
  ls::manual_seed(40);
  const std::vector<Config> configs = {
      {{2, 2, 5, 5}, {3, 2, 3, 3}, {1}, {0}, {1}, 1},        // plain
      {{1, 2, 6, 5}, {3, 2, 3, 3}, {2}, {1}, {1}, 1},        // stride 2, padding 1
      {{1, 2, 6, 6}, {2, 2, 3, 2}, {1}, {1}, {2}, 1},        // dilation 2
      {{1, 4, 4, 5}, {4, 2, 3, 3}, {1, 2}, {1, 0}, {1}, 2},  // groups 2, per-dim stride/padding
      {{1, 3, 4, 4}, {3, 1, 3, 3}, {2}, {1}, {1}, 3},        // depthwise
      {{2, 3, 3, 3}, {4, 3, 1, 1}, {1}, {0}, {1}, 1},        // 1x1 fast path
  };
  for (size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    CAPTURE(i);
    ls::Tensor x = randn64(c.x_sizes), w = randn64(c.w_sizes), b = randn64({c.w_sizes[0]});
    CHECK_GRADCHECK(
        [&](const Inputs& v) {
          return ls::conv2d(v[0], v[1], v[2], c.stride, c.padding, c.dilation, c.groups);
        },
        {x, w, b});
    CHECK_GRADCHECK(  // no bias
        [&](const Inputs& v) {
          return ls::conv2d(v[0], v[1], ls::Tensor(), c.stride, c.padding, c.dilation, c.groups);
        },
        {x, w});
  }
}

TEST_CASE("functions: conv2d records Conv2dBackward and skips inputs that need no grad") {
  ls::manual_seed(41);
  ls::Tensor x = randn64({2, 2, 4, 4});
  ls::Tensor w = randn64({3, 2, 3, 3});
  w.requires_grad_(true);
  ls::Tensor y = ls::conv2d(x, w, ls::Tensor(), {1}, {1});
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "Conv2dBackward");
  CHECK(y.grad_fn()->next_edges().size() == 3);
  CHECK_FALSE(y.grad_fn()->next_edges()[0].is_valid());  // x needs no grad
  CHECK_FALSE(y.grad_fn()->next_edges()[2].is_valid());  // no bias
  y.sum().backward();
  CHECK_FALSE(x.grad().defined());
  REQUIRE(w.grad().defined());
  CHECK(w.grad().sizes() == w.sizes());
  // With "same" padding and a sum loss, dL/dw[o, c, i, j] is the sum of x[:, c] over the
  // positions kernel tap (i, j) touches: the centre tap sees every pixel.
  std::vector<double> gw = w.grad().to_vector<double>();
  double sum_c0 = x.select(1, 0).sum().item<double>();
  CHECK(gw[4] == doctest::Approx(sum_c0));  // w[0, 0, 1, 1]

  {
    ls::NoGradGuard no_grad;
    CHECK(ls::conv2d(x, w, ls::Tensor()).grad_fn() == nullptr);
  }
}
