// tests/autograd/test_double_backward.cpp — gradients of gradients (Note [Double
// backward] in autograd/double_backward.h): gradgradcheck of every op the list names,
// a WGAN-GP gradient penalty end to end, and the error for every other op.
// Read before: tests/support/gradcheck.h, autograd/double_backward.h.
// Read next: tests/autograd/test_autograd_grad.cpp.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "autograd/grad.h"
#include "core/autocast.h"
#include "core/factory.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using ls::Tensor;
using ls::testing::away_from_zero;
using ls::testing::randn64;

namespace {

// d/dx of a (N, 1) critic output, summed over the batch: the WGAN-GP gradient.
Tensor input_gradient(const Tensor& out, const Tensor& x) {
  return ls::autograd::grad({out}, {x}, {ls::ones_like(out)}, std::nullopt,
                            /*create_graph=*/true)[0];
}

// ((||g_n|| - 1)^2).mean() over the rows g_n of g.
Tensor penalty_of(const Tensor& g) { return ((g * g).sum({1}).sqrt() - 1.0).pow(2.0).mean(); }

}  // namespace

TEST_CASE("double backward: + - * / with broadcasting, scalars, neg and pow") {
  ls::manual_seed(11);
  Tensor a = randn64({2, 3}), b = away_from_zero(randn64({3}));
  CHECK_GRADGRADCHECK([](const std::vector<Tensor>& x) { return x[0] * x[1] + x[0] / x[1] - x[1]; },
                      {a, b});
  CHECK_GRADGRADCHECK([](const std::vector<Tensor>& x) { return x[0] * x[0] * x[1]; }, {a, b});
  Tensor c = away_from_zero(randn64({2, 2}), 0.3);
  CHECK_GRADGRADCHECK([](const std::vector<Tensor>& x) {
    return (x[0] * 2.5 + 1.0 - 3.0 / x[0] + (2.0 - x[0]) / 4.0) * x[0] * 3;
  }, {c});
  CHECK_GRADGRADCHECK([](const std::vector<Tensor>& x) {
    return (-x[0]).pow(3.0) + x[0].pow(2.0) * x[0].pow(-1.0);
  }, {c});
}

TEST_CASE("double backward: sum, mean, exp, log, tanh, sigmoid, where") {
  ls::manual_seed(12);
  Tensor a = randn64({2, 3});
  CHECK_GRADGRADCHECK([](const std::vector<Tensor>& x) {
    return (x[0] * x[0]).sum({1}) + x[0].pow(3.0).mean({1}, /*keepdim=*/true).squeeze(1);
  }, {a});
  CHECK_GRADGRADCHECK([](const std::vector<Tensor>& x) { return x[0].pow(3.0).sum() * x[0].mean(); },
                      {a});
  CHECK_GRADGRADCHECK([](const std::vector<Tensor>& x) {
    return x[0].exp() + (x[0] * x[0] + 1.0).log() + x[0].tanh() * x[0].sigmoid();
  }, {a});
  CHECK_GRADGRADCHECK([](const std::vector<Tensor>& x) {
    return ls::where(x[0].gt(0.0), x[0] * x[0], x[0].pow(3.0));
  }, {away_from_zero(a)});
}

TEST_CASE("double backward: sqrt, rsqrt, abs, sin, cos, softmax, log_softmax") {
  ls::manual_seed(19);
  Tensor a = randn64({2, 3}), b = away_from_zero(randn64({2, 3}));
  CHECK_GRADGRADCHECK([](const std::vector<Tensor>& x) {
    Tensor p = x[0] * x[0] + 0.5;
    return p.sqrt() * x[1] + p.rsqrt() + x[1].abs() * x[0] + x[0].sin() * x[0].cos();
  }, {a, b});
  CHECK_GRADGRADCHECK([](const std::vector<Tensor>& x) {
    return x[0].softmax(1) * x[1] + (x[0] * x[1]).log_softmax(0);
  }, {a, b});
}

TEST_CASE("double backward: relu and leaky_relu (second derivative zero away from the kink)") {
  ls::manual_seed(13);
  Tensor a = away_from_zero(randn64({2, 3})), b = away_from_zero(randn64({2, 3}));
  CHECK_GRADGRADCHECK([](const std::vector<Tensor>& x) { return (x[0] * x[1]).relu() * x[1]; },
                      {a, b});
  CHECK_GRADGRADCHECK([](const std::vector<Tensor>& x) {
    return ls::nn::leaky_relu(x[0] * x[1], 0.2) * x[0];
  }, {a, b});
}

TEST_CASE("double backward: matmul (matrices, vectors, batches), linear") {
  ls::manual_seed(14);
  auto product = [](const std::vector<Tensor>& x) { return ls::matmul(x[0], x[1]).tanh(); };
  CHECK_GRADGRADCHECK(product, {randn64({2, 3}), randn64({3, 2})});
  CHECK_GRADGRADCHECK(product, {randn64({3}), randn64({3, 2})});
  CHECK_GRADGRADCHECK(product, {randn64({2, 2, 3}), randn64({3, 2})});     // the folded fast path
  CHECK_GRADGRADCHECK(product, {randn64({2, 2, 3}), randn64({1, 3, 2})});  // broadcast batch
  CHECK_GRADGRADCHECK([](const std::vector<Tensor>& x) { return ls::linear(x[0], x[1], x[2]).tanh(); },
                      {randn64({2, 3}), randn64({4, 3}), randn64({4})});
  CHECK_GRADGRADCHECK([](const std::vector<Tensor>& x) { return ls::linear(x[0], x[1], x[2]).sigmoid(); },
                      {randn64({2, 2, 3}), randn64({2, 3}), randn64({2})});
}

TEST_CASE("double backward: conv2d (stride and padding, dilation, bias)") {
  ls::manual_seed(20);
  Tensor x = randn64({1, 2, 5, 5}), w = randn64({2, 2, 3, 3}), b = randn64({2});
  CHECK_GRADGRADCHECK([](const std::vector<Tensor>& p) {
    return ls::conv2d(p[0], p[1], p[2], {2, 2}, {1, 1}).tanh();  // 5 -> 3, the last row skipped
  }, {x, w, b});
  CHECK_GRADGRADCHECK([](const std::vector<Tensor>& p) {
    return ls::conv2d(p[0], p[1], Tensor(), {1, 1}, {1, 1}, {2, 2}).tanh();
  }, {x, w});
  // groups > 1: tests/autograd/test_double_backward_nn.cpp.
}

TEST_CASE("double backward: view, reshape, expand, transpose, permute, (un)squeeze, clone") {
  ls::manual_seed(15);
  Tensor a = randn64({2, 3});
  CHECK_GRADGRADCHECK([](const std::vector<Tensor>& x) {
    Tensor v = x[0].view({3, 2}).transpose(0, 1).reshape({6});
    return v * x[0].flatten() * x[0].permute({1, 0}).clone().reshape({6});
  }, {a});
  CHECK_GRADGRADCHECK([](const std::vector<Tensor>& x) {
    return x[0].unsqueeze(0).expand({4, 2, 3}).squeeze() * x[1].expand({4, 2, 3}) * x[0];
  }, {a, randn64({4, 1, 3})});
}

TEST_CASE("double backward: the gradient penalty of a small MLP critic, end to end") {
  ls::manual_seed(16);
  // D(x) = W2 act(W1 x + b1) + b2 with x (5, 3); the penalty's gradient in every
  // input and parameter against finite differences.
  for (const char* act : {"tanh", "leaky_relu"}) {
    CAPTURE(act);
    const bool leaky = std::string(act) == "leaky_relu";
    auto penalty = [leaky](const std::vector<Tensor>& p) {
      ls::AutoGradMode grad_on(true);  // gradcheck's numerical pass runs under NoGradGuard
      Tensor h = ls::linear(p[0], p[1], p[2]);
      h = leaky ? ls::nn::leaky_relu(h, 0.2) : h.tanh();
      Tensor out = ls::linear(h, p[3], p[4]);  // (5, 1)
      return penalty_of(input_gradient(out, p[0]));
    };
    CHECK_GRADCHECK(penalty, {randn64({5, 3}), randn64({4, 3}), randn64({4}), randn64({1, 4}),
                              randn64({1})});
  }
  // A DCGAN-style critic: a strided convolution, tanh, flatten, linear.
  auto conv_penalty = [](const std::vector<Tensor>& p) {
    ls::AutoGradMode grad_on(true);
    Tensor h = ls::conv2d(p[0], p[1], p[2], {2, 2}, {1, 1}).tanh().flatten(1);  // (2, 8)
    return penalty_of(input_gradient(ls::linear(h, p[3], p[4]), p[0]));
  };
  CHECK_GRADCHECK(conv_penalty, {randn64({2, 1, 4, 4}), randn64({2, 1, 3, 3}), randn64({2}),
                                 randn64({1, 8}), randn64({1})});
}

TEST_CASE("double backward: WGAN-GP step with nn modules, backward equals grad, grad touches no .grad") {
  ls::manual_seed(17);
  auto critic = std::make_shared<ls::nn::Sequential>(
      std::make_shared<ls::nn::Linear>(3, 8), std::make_shared<ls::nn::LeakyReLU>(0.2),
      std::make_shared<ls::nn::Linear>(8, 1));
  Tensor real = ls::randn({6, 3}), fake = ls::randn({6, 3});
  Tensor alpha = ls::rand({6, 1});
  Tensor mixed = (alpha * real + (1.0 - alpha) * fake).detach();
  mixed.requires_grad_(true);
  Tensor g = input_gradient(critic->forward(mixed), mixed);  // (6, 3)
  CHECK(g.requires_grad());
  Tensor d_loss = critic->forward(fake).mean() - critic->forward(real).mean() + 10.0 * penalty_of(g);

  std::vector<Tensor> params = critic->parameters();
  std::vector<Tensor> expected = ls::autograd::grad({d_loss}, params, {}, /*retain_graph=*/true);
  for (const Tensor& p : params) CHECK_FALSE(p.grad().defined());
  CHECK_FALSE(mixed.grad().defined());
  d_loss.backward();
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(i);
    REQUIRE(params[i].grad().defined());
    CHECK(ls::allclose(params[i].grad(), expected[i], 1e-5, 1e-6));
  }
  // The penalty reaches the first layer's weight: its gradient differs without it.
  std::vector<Tensor> without = ls::autograd::grad(
      {critic->forward(fake).mean() - critic->forward(real).mean()}, {params[0]});
  CHECK_FALSE(ls::allclose(without[0], expected[0], 1e-5, 1e-6));
}

TEST_CASE("double backward: an op without a second derivative refuses, naming itself") {
  ls::manual_seed(18);
  Tensor x = ls::randn({2, 3}, ls::requires_grad());
  const Tensor wc = ls::randn({4, 3, 1, 1});
  // conv2d under bf16 autocast records Conv2dAutocastBackward, whose formula does not
  // record (a 1x1 convolution: x's rows as images of 3 channels and one pixel).
  auto refusing = [&wc](const Tensor& t) {
    ls::AutocastGuard amp(ls::kBFloat16);
    const Tensor images = t.reshape({-1, 3, 1, 1});  // (N, 3, 1, 1)
    return ls::conv2d(images, wc, Tensor(), {1, 1}, {0, 0}, {1, 1}, 1).to(ls::kFloat32);
  };
  Tensor y = refusing(x * x).sum();
  Tensor g = ls::autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  // The first-order gradient is exact, as without create_graph.
  Tensor plain = ls::autograd::grad({refusing(x * x).sum()}, {x})[0];
  CHECK(ls::allclose(g.detach(), plain));
  REQUIRE(g.requires_grad());
  const char* expected = "double backward through Conv2dAutocastBackward is not implemented; ops that "
                         "support it: AddBackward";
  CHECK_THROWS_WITH_AS(ls::autograd::grad({g.sum()}, {x}, {}, /*retain_graph=*/true),
                       doctest::Contains(expected), ls::Error);
  CHECK_THROWS_WITH_AS((g * g).sum().backward(), doctest::Contains(expected), ls::Error);

  // Beside a supported path it still refuses: the sum's second derivative is not a silent
  // "tanh part only".
  Tensor z = x.tanh().sum() + refusing(x * x).pow(2.0).sum();
  Tensor gz = ls::autograd::grad({z}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  CHECK_THROWS_WITH_AS(ls::autograd::grad({gz.sum()}, {x}),
                       doctest::Contains("double backward through Conv2dAutocastBackward"), ls::Error);

  // A gradient through such an op that is then only used first-order (the norm of a
  // penalty) is fine: the refusal is in the second derivative only.
  Tensor w = ls::randn({3}, ls::requires_grad());
  Tensor gw = ls::autograd::grad({(x * w).sum()}, {x}, {}, std::nullopt, true)[0];  // = w, broadcast
  Tensor n = refusing(gw * gw).sum();
  Tensor dw = ls::autograd::grad({n}, {w})[0];
  CHECK(dw.sizes() == std::vector<int64_t>{3});
}
