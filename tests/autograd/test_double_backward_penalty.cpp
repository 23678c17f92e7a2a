// tests/autograd/test_double_backward_penalty.cpp — the WGAN-GP gradient penalty of a
// DCGAN-style critic (conv2d, batch_norm, leaky_relu, conv_transpose2d, linear),
// differentiated into the input and every parameter and checked against finite
// differences (Note [Double backward] in autograd/double_backward.h).
// Read before: tests/autograd/test_double_backward_nn.cpp.
// Read next: tests/autograd/test_autograd_grad.cpp.
#include <doctest/doctest.h>

#include <vector>

#include "autograd/grad.h"
#include "core/conv_transpose.h"
#include "core/factory.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "nn/activation.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using ls::Tensor;
using ls::testing::randn64;

TEST_CASE("double backward: WGAN-GP penalty through conv2d, batch_norm, leaky_relu, conv_transpose2d") {
  ls::manual_seed(50);
  // p: x (2, 1, 4, 4), conv weight (2, 1, 3, 3) and bias (2), batch-norm weight and
  // bias (2), conv-transpose weight (2, 1, 2, 2), linear weight (1, 16) and bias (1).
  auto penalty = [](const std::vector<Tensor>& p) {
    ls::AutoGradMode grad_on(true);  // gradcheck's numerical pass runs under NoGradGuard
    Tensor h = ls::conv2d(p[0], p[1], p[2], {2, 2}, {1, 1});                          // (2, 2, 2, 2)
    h = ls::batch_norm(h, p[3], p[4], Tensor(), Tensor(), /*training=*/true, 0.1, 1e-5);
    h = ls::nn::leaky_relu(h, 0.2);
    h = ls::nn::leaky_relu(ls::conv_transpose2d(h, p[5], Tensor(), {2, 2}), 0.2);  // (2, 1, 4, 4)
    Tensor score = ls::linear(h.flatten(1), p[6], p[7]);                                // (2, 1)
    Tensor g = ls::autograd::grad({score}, {p[0]}, {ls::ones_like(score)}, std::nullopt,
                                  /*create_graph=*/true)[0];                            // (2, 1, 4, 4)
    return ((g * g).sum({1, 2, 3}).sqrt() - 1.0).pow(2.0).mean();
  };
  const std::vector<Tensor> params{randn64({2, 1, 4, 4}), randn64({2, 1, 3, 3}), randn64({2}),
                                   randn64({2}),          randn64({2}),          randn64({2, 1, 2, 2}),
                                   randn64({1, 16}),      randn64({1})};
  CHECK_GRADCHECK(penalty, params);

  // The penalty is not flat in the critic's first layer: its gradient there is nonzero.
  std::vector<Tensor> leaves;
  for (const Tensor& t : params) leaves.push_back(t.detach().requires_grad_(true));
  Tensor dw = ls::autograd::grad({penalty(leaves)}, {leaves[1]})[0];
  CHECK(dw.abs().sum().item<double>() > 1e-6);
}
