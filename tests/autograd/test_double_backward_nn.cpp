// tests/autograd/test_double_backward_nn.cpp — second derivatives of the nn ops
// (Note [Double backward] in autograd/double_backward.h, Note [Linear backward
// formulas] in autograd/functions/linear_map.h): gradgradcheck in float64 of
// the convolutions (grouped, strided, dilated, transposed), the normalisations,
// gelu, the losses with every reduction, pooling, indexing, cat/stack, bmm, and
// max/min, add_relu, dropout, unbind.
// The WGAN-GP penalty through a conv net is in test_double_backward_penalty.cpp.
// Read before: tests/autograd/test_double_backward.cpp.
// Read next: tests/autograd/test_double_backward_penalty.cpp.
#include <doctest/doctest.h>

#include <vector>

#include "autograd/functions/unbind.h"
#include "autograd/grad.h"
#include "core/conv_transpose.h"
#include "core/factory.h"
#include "core/losses.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "nn/group_norm.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using ls::Tensor;
using ls::testing::away_from_zero;
using ls::testing::distinct_values;
using ls::testing::randn64;
using Inputs = std::vector<Tensor>;

namespace {

Tensor int64s(const std::vector<int64_t>& v, const ls::IntList& sizes) {
  return ls::tensor(v, sizes, ls::TensorOptions().dtype(ls::kInt64));
}

}  // namespace

TEST_CASE("double backward: conv2d with groups, stride, dilation and bias") {
  ls::manual_seed(41);
  CHECK_GRADGRADCHECK([](const Inputs& p) {
    return ls::conv2d(p[0], p[1], p[2], {2, 1}, {1, 0}, {1, 2}, /*groups=*/2).tanh();
  }, {randn64({1, 4, 5, 5}), randn64({2, 2, 2, 2}), randn64({2})});
  CHECK_GRADGRADCHECK([](const Inputs& p) {  // depthwise, stride 2: the last row skipped
    return ls::conv2d(p[0], p[1], Tensor(), {2, 2}, {1, 1}, {1, 1}, /*groups=*/2).sigmoid();
  }, {randn64({2, 2, 4, 4}), randn64({2, 1, 3, 3})});
}

TEST_CASE("double backward: conv_transpose2d (stride, padding, output_padding, groups, dilation)") {
  ls::manual_seed(42);
  CHECK_GRADGRADCHECK([](const Inputs& p) {
    return ls::conv_transpose2d(p[0], p[1], p[2], {2, 2}, {1, 1}, {1, 1}).tanh();
  }, {randn64({1, 2, 3, 3}), randn64({2, 2, 3, 3}), randn64({2})});
  CHECK_GRADGRADCHECK([](const Inputs& p) {
    return ls::conv_transpose2d(p[0], p[1], Tensor(), {1, 2}, {0, 1}, {0, 0}, /*groups=*/2, {2, 1})
        .sigmoid();
  }, {randn64({1, 4, 2, 3}), randn64({4, 1, 2, 2})});
}

TEST_CASE("double backward: batch_norm (training and eval), layer_norm, group_norm") {
  ls::manual_seed(43);
  for (bool training : {true, false}) {
    CAPTURE(training);
    const Tensor rm = randn64({3}), rv = ls::rand({3}, ls::TensorOptions().dtype(ls::kFloat64)) + 0.5;
    CHECK_GRADGRADCHECK([&](const Inputs& p) {
      Tensor mean = rm.clone(), var = rv.clone();  // training updates them in place
      return ls::batch_norm(p[0], p[1], p[2], mean, var, training, 0.1, 1e-5).tanh();
    }, {randn64({2, 3, 2, 2}), randn64({3}), randn64({3})});
    CHECK_GRADGRADCHECK([&](const Inputs& p) {  // (N, C), no affine parameters
      return ls::batch_norm(p[0], Tensor(), Tensor(), rm.clone(), rv.clone(), training, 0.1, 1e-5)
          .pow(3.0);
    }, {randn64({4, 3})});
  }
  CHECK_GRADGRADCHECK([](const Inputs& p) {
    return ls::layer_norm(p[0], {2, 3}, p[1], p[2], 1e-5).tanh();
  }, {randn64({2, 2, 3}), randn64({2, 3}), randn64({2, 3})});
  CHECK_GRADGRADCHECK([](const Inputs& p) { return ls::layer_norm(p[0], {4}, Tensor(), Tensor(), 1e-5).pow(3.0); },
                      {randn64({3, 4})});
  CHECK_GRADGRADCHECK([](const Inputs& p) {
    return ls::nn::group_norm(p[0], 2, p[1], p[2], 1e-5).tanh();
  }, {randn64({2, 4, 2}), randn64({4}), randn64({4})});
}

TEST_CASE("double backward: gelu, to every order") {
  ls::manual_seed(44);
  CHECK_GRADGRADCHECK([](const Inputs& p) { return (p[0] * p[1]).gelu(); },
                      {randn64({2, 3}), randn64({2, 3})});
  // The third derivative: gelu'' differentiated (GeluDerivativeBackward's formula).
  CHECK_GRADCHECK([](const Inputs& p) {
    ls::AutoGradMode grad_on(true);  // gradcheck's numerical pass runs under NoGradGuard
    Tensor d1 = ls::autograd::grad({p[0].gelu().sum()}, {p[0]}, {}, std::nullopt, true)[0];
    return ls::autograd::grad({d1.sum()}, {p[0]}, {}, std::nullopt, true)[0];
  }, {randn64({5})});
}

TEST_CASE("double backward: mse_loss, cross_entropy, nll_loss, bce (with logits), smooth_l1 with every reduction") {
  ls::manual_seed(45);
  const Tensor target = int64s({2, -100, 0, 1}, {4});
  CHECK_GRADGRADCHECK([](const Inputs& p) { return ls::mse_loss(p[0].tanh(), p[1]); },
                      {randn64({2, 3}), randn64({2, 3})});
  CHECK_GRADGRADCHECK([&](const Inputs& p) { return ls::cross_entropy(p[0] * p[0], target); },
                      {randn64({4, 3})});
  CHECK_GRADGRADCHECK([](const Inputs& p) { return ls::cross_entropy(p[0].tanh(), p[1]); },
                      {randn64({3, 4}), int64s({3, 0, 1}, {3})});
  for (ls::Reduction r : {ls::kNone, ls::kSum, ls::kMean}) {
    CAPTURE(static_cast<int>(r));
    CHECK_GRADGRADCHECK([&](const Inputs& p) {
      return ls::nll_loss((p[0] * p[0]).log_softmax(1), target, r);
    }, {randn64({4, 3})});
    CHECK_GRADGRADCHECK([&](const Inputs& p) {
      return ls::nll_loss((p[0] * p[0]).log_softmax(1), target, p[1].exp(), r);
    }, {randn64({4, 3}), randn64({3})});
    CHECK_GRADGRADCHECK([&](const Inputs& p) {
      return ls::binary_cross_entropy(p[0].sigmoid(), p[1], r);
    }, {randn64({2, 3}), ls::rand({2, 3}, ls::TensorOptions().dtype(ls::kFloat64))});
    CHECK_GRADGRADCHECK([&](const Inputs& p) {
      return ls::binary_cross_entropy_with_logits(p[0] * p[1], p[1].sigmoid(), r);
    }, {randn64({2, 3}), randn64({2, 3})});
    // |d| >= 0.15, away from the kinks at 0 and at beta: all quadratic (beta 5), all linear (beta 0.1).
    const Tensor d = away_from_zero(randn64({2, 3}), 0.3) * 0.5;
    const Tensor y = ls::zeros({2, 3}, ls::TensorOptions().dtype(ls::kFloat64));
    for (double beta : {5.0, 0.1}) {
      CHECK_GRADGRADCHECK([&](const Inputs& p) { return ls::smooth_l1_loss(p[0], p[1], r, beta); }, {d, y});
    }
  }
}

TEST_CASE("double backward: max_pool2d, adaptive_avg_pool2d") {
  ls::manual_seed(46);
  CHECK_GRADGRADCHECK([](const Inputs& p) {
    return ls::max_pool2d(p[0] * p[0].abs(), {2, 2}, {1, 1}, {0, 0}).tanh();  // overlapping windows
  }, {distinct_values({1, 2, 3, 3}, 0.2)});
  CHECK_GRADGRADCHECK([](const Inputs& p) {
    return ls::max_pool2d(p[0], {2, 2}, {2, 2}, {1, 1}).pow(3.0);  // padding
  }, {distinct_values({1, 1, 3, 4}, 0.2)});
  CHECK_GRADGRADCHECK([](const Inputs& p) { return ls::adaptive_avg_pool2d(p[0] * p[0], {2, 3}).tanh(); },
                      {randn64({1, 2, 3, 4})});
}

TEST_CASE("double backward: narrow, slice, select, index_select, gather, embedding") {
  ls::manual_seed(47);
  const Tensor idx = int64s({2, 0, 2}, {3});
  CHECK_GRADGRADCHECK([](const Inputs& p) {
    return (p[0].narrow(1, 1, 2) * p[0].slice(1, 0, 3, 2)).tanh() * p[0][1].narrow(0, 0, 2);
  }, {randn64({2, 3})});
  CHECK_GRADGRADCHECK([&](const Inputs& p) { return p[0].index_select(0, idx).pow(3.0); },
                      {randn64({3, 2})});
  const Tensor gidx = int64s({0, 2, 2, 1, 0, 0}, {2, 3});
  CHECK_GRADGRADCHECK([&](const Inputs& p) { return p[0].gather(1, gidx).pow(3.0); },
                      {randn64({2, 3})});
  const Tensor tokens = int64s({1, 3, 0, 1, 2, 3}, {2, 3});
  CHECK_GRADGRADCHECK([&](const Inputs& p) { return ls::embedding(p[0], tokens, /*padding_idx=*/0).pow(3.0); },
                      {randn64({4, 2})});
  CHECK_GRADGRADCHECK([&](const Inputs& p) { return ls::embedding(p[0], tokens).tanh(); },
                      {randn64({4, 2})});
}

TEST_CASE("double backward: cat, stack, bmm") {
  ls::manual_seed(48);
  CHECK_GRADGRADCHECK([](const Inputs& p) {
    return ls::cat({ls::cat({p[0], p[1] * p[0]}, 1).tanh(), ls::stack({p[1], p[0]}, 0).pow(2.0).sum({0})}, 1);
  }, {randn64({2, 2}), randn64({2, 2})});
  CHECK_GRADGRADCHECK([](const Inputs& p) { return ls::bmm(p[0], p[1]).tanh(); },
                      {randn64({2, 2, 3}), randn64({2, 3, 2})});
}

TEST_CASE("double backward: a plain backward through the same ops is unchanged by create_graph") {
  // The recorded formulas and the native fast path give the same first-order gradient.
  ls::manual_seed(49);
  Tensor x = ls::randn({2, 4, 5, 5}, ls::requires_grad());
  Tensor w = ls::randn({4, 2, 3, 3}, ls::requires_grad());
  Tensor wt = ls::randn({4, 1, 2, 2}, ls::requires_grad());
  Tensor bn_w = ls::randn({4}, ls::requires_grad()), bn_b = ls::randn({4}, ls::requires_grad());
  auto net = [&] {
    Tensor h = ls::conv2d(x, w, Tensor(), {1, 1}, {1, 1}, {1, 1}, 2);
    h = ls::batch_norm(h, bn_w, bn_b, Tensor(), Tensor(), true, 0.1, 1e-5).gelu();
    h = ls::conv_transpose2d(h, wt, Tensor(), {2, 2}, {0, 0}, {0, 0}, 4);
    h = ls::max_pool2d(h, {2, 2}, {2, 2}, {0, 0});
    return ls::layer_norm(h, {5}, Tensor(), Tensor(), 1e-5).pow(2.0).sum();
  };
  const std::vector<Tensor> wrt{x, w, wt, bn_w, bn_b};
  std::vector<Tensor> plain = ls::autograd::grad({net()}, wrt);
  std::vector<Tensor> recorded = ls::autograd::grad({net()}, wrt, {}, std::nullopt, true);
  for (size_t i = 0; i < wrt.size(); ++i) {
    CAPTURE(i);
    CHECK(recorded[i].requires_grad());
    CHECK(ls::allclose(recorded[i].detach(), plain[i], 1e-4, 1e-4));
  }
}

TEST_CASE("double backward: max, min (all and along a dim), add_relu, dropout, unbind") {
  ls::manual_seed(51);
  CHECK_GRADGRADCHECK([](const Inputs& p) {
    return (p[0] * p[0]).max() * p[0] + std::get<0>((p[0] * p[0]).min(1, /*keepdim=*/true)) * p[0];
  }, {distinct_values({2, 3}, 0.3) + 0.05});
  CHECK_GRADGRADCHECK([](const Inputs& p) { return ls::add_relu(p[0] * p[1], p[1]) * p[0]; },
                      {away_from_zero(randn64({2, 3})), away_from_zero(randn64({2, 3}))});
  CHECK_GRADGRADCHECK([](const Inputs& p) {
    ls::manual_seed(5);  // the same mask in every evaluation
    return ls::dropout(p[0] * p[0], 0.4, /*training=*/true) * p[0];
  }, {randn64({2, 4})});
  CHECK_GRADGRADCHECK([](const Inputs& p) {
    std::vector<Tensor> rows = ls::unbind(p[0] * p[0], 0);
    return rows[0] * rows[2].tanh();  // row 1 gets no gradient
  }, {randn64({3, 2})});
}
