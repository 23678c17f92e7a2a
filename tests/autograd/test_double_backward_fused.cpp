// tests/autograd/test_double_backward_fused.cpp — second derivatives of the ops
// that refused them before (Note [Double backward] in autograd/double_backward.h):
// scatter, the fused batch_norm_relu and batch_norm_add_relu, activation
// checkpointing (Note [Checkpoint under create_graph] in autograd/checkpoint.cpp)
// by gradgradcheck in float64; the bf16 conversions and dropout_add, whose
// bf16 roundings make finite differences meaningless, and linear under bf16
// autocast, against the same second derivatives through the plain ops they stand for.
// Read before: tests/autograd/test_double_backward_nn.cpp.
// Read next: tests/autograd/test_double_backward_penalty.cpp.
#include <doctest/doctest.h>

#include <vector>

#include "autograd/checkpoint.h"
#include "autograd/functions/autocast_ops.h"
#include "autograd/grad.h"
#include "core/autocast.h"
#include "core/factory.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using ls::Tensor;
using ls::testing::randn64;
using Inputs = std::vector<Tensor>;

namespace {

Tensor int64s(const std::vector<int64_t>& v, const ls::IntList& sizes) {
  return ls::tensor(v, sizes, ls::TensorOptions().dtype(ls::kInt64));
}

// d/dx of out with grad_output v, recorded (create_graph).
Tensor grad_recorded(const Tensor& out, const Tensor& x, const Tensor& v) {
  return ls::autograd::grad({out}, {x}, {v}, std::nullopt, /*create_graph=*/true)[0];
}

}  // namespace

TEST_CASE("double backward: scatter into self and from src (src larger than the index)") {
  ls::manual_seed(61);
  const Tensor idx = int64s({0, 2, 1, 0}, {2, 2});  // no position written twice
  CHECK_GRADGRADCHECK([&](const Inputs& p) {
    return (p[0] * p[0]).scatter(1, idx, p[1].tanh()).pow(3.0) * p[0];
  }, {randn64({2, 3}), randn64({2, 3})});
  CHECK_GRADGRADCHECK([&](const Inputs& p) {  // along dim 0, src only
    const Tensor base = ls::zeros({3, 2}, ls::TensorOptions().dtype(ls::kFloat64));
    return base.scatter(0, int64s({2, 0}, {1, 2}), p[0] * p[0]).sigmoid();
  }, {randn64({2, 2})});
}

TEST_CASE("double backward: batch_norm_relu and batch_norm_add_relu, training and eval") {
  ls::manual_seed(62);
  for (bool training : {true, false}) {
    CAPTURE(training);
    const Tensor rm = randn64({3}), rv = ls::rand({3}, ls::TensorOptions().dtype(ls::kFloat64)) + 0.5;
    CHECK_GRADGRADCHECK([&](const Inputs& p) {
      return ls::batch_norm_relu(p[0], p[1], p[2], rm.clone(), rv.clone(), training, 0.1, 1e-5).pow(2.0);
    }, {randn64({2, 3, 2, 2}), randn64({3}), randn64({3})});
    CHECK_GRADGRADCHECK([&](const Inputs& p) {  // no affine parameters: the mask from -mean invstd
      return ls::batch_norm_relu(p[0], Tensor(), Tensor(), rm.clone(), rv.clone(), training, 0.1, 1e-5)
          .pow(3.0);
    }, {randn64({4, 3})});
    CHECK_GRADGRADCHECK([&](const Inputs& p) {
      return ls::batch_norm_add_relu(p[0], p[1], p[2], p[3], rm.clone(), rv.clone(), training, 0.1, 1e-5)
          .pow(2.0);
    }, {randn64({2, 3, 2, 2}), randn64({2, 3, 2, 2}), randn64({3}), randn64({3})});
  }
}

TEST_CASE("double backward: batch_norm_add_relu with its mask in bits (channels-last bf16)") {
  // The recorded formula reads the mask back from the bits: dL/dresidual = v * mask,
  // so d<dL/dresidual, u>/dv = u * mask, which must be u where the output is positive.
  ls::manual_seed(63);
  const ls::IntList shape{2, 32, 3, 3};
  Tensor x = ls::native::channels_last(ls::randn(shape).to(ls::kBFloat16)).requires_grad_(true);
  Tensor res = ls::native::channels_last(ls::randn(shape).to(ls::kBFloat16)).requires_grad_(true);
  const Tensor w = ls::randn({32}).requires_grad_(true), b = ls::randn({32}).requires_grad_(true);
  const Tensor out = ls::batch_norm_add_relu(x, res, w, b, ls::zeros({32}), ls::ones({32}), true, 0.1, 1e-5);
  Tensor v = ls::randn(shape).to(ls::kBFloat16).requires_grad_(true);
  const Tensor u = ls::randn(shape).to(ls::kBFloat16);
  const Tensor g_res = grad_recorded(out, res, v);
  REQUIRE(g_res.requires_grad());
  const Tensor plain = ls::autograd::grad({out}, {res}, {v.detach()}, /*retain_graph=*/true)[0];
  CHECK(ls::allclose(g_res.detach().to(ls::kFloat32), plain.to(ls::kFloat32)));
  const Tensor dv = ls::autograd::grad({(g_res.to(ls::kFloat32) * u.to(ls::kFloat32)).sum()}, {v}, {},
                                      /*retain_graph=*/true)[0];
  const Tensor expected = ls::where(out.detach().gt(0.0), u, ls::zeros_like(u));
  CHECK(ls::allclose(dv.to(ls::kFloat32), expected.to(ls::kFloat32)));
  // And the input's gradient is differentiable into x, w and b (the batch-norm part).
  const Tensor g_x = grad_recorded(out, x, v);
  const std::vector<Tensor> second = ls::autograd::grad({(g_x.to(ls::kFloat32) * u.to(ls::kFloat32)).sum()},
                                                        {x, w}, {}, /*retain_graph=*/true);
  CHECK(second[0].sizes() == x.sizes());
  CHECK(second[1].sizes() == w.sizes());
}

TEST_CASE("double backward: checkpoint recomputes with history") {
  ls::manual_seed(64);
  const Tensor w = randn64({3, 3});  // a parameter fn closes over (no gradient taken here)
  auto fn = [&w](const Inputs& in) { return (in[0].matmul(w) * in[1]).tanh(); };
  CHECK_GRADGRADCHECK([&](const Inputs& p) { return ls::autograd::checkpoint(fn, {p[0], p[1]}); },
                      {randn64({2, 3}), randn64({2, 3})});
  // One input computed from another, and one tensor passed twice: each path counted once.
  CHECK_GRADGRADCHECK([&](const Inputs& p) {
    return ls::autograd::checkpoint(fn, {p[0], p[0].sin()}) + ls::autograd::checkpoint(fn, {p[0], p[0]});
  }, {randn64({2, 3})});
}

TEST_CASE("double backward: checkpoint reaches the parameters fn uses, and no .grad changes") {
  ls::manual_seed(65);
  Tensor w = ls::randn({3, 4}, ls::requires_grad());
  Tensor x = ls::randn({2, 3}, ls::requires_grad());
  auto fn = [&w](const Inputs& in) { return in[0].matmul(w).tanh(); };
  auto penalty = [&](bool checkpointed) {
    const Tensor out = checkpointed ? ls::autograd::checkpoint(fn, {x}) : fn({x});
    const Tensor g = grad_recorded(out, x, ls::ones_like(out));  // (2, 3)
    return (g * g).sum();
  };
  const std::vector<Tensor> expected = ls::autograd::grad({penalty(false)}, {x, w});
  const std::vector<Tensor> got = ls::autograd::grad({penalty(true)}, {x, w});
  CHECK_FALSE(w.grad().defined());
  CHECK_FALSE(x.grad().defined());
  CHECK(ls::allclose(got[0], expected[0], 1e-5, 1e-6));
  CHECK(ls::allclose(got[1], expected[1], 1e-5, 1e-6));
}

TEST_CASE("double backward: to(dtype) through bfloat16 and back") {
  // y = b^3 with b = x rounded to bf16: dy/dx = 3 b^2 (rounded on the way back), and
  // its derivative 6 b through the same ToCopyBackward nodes.
  ls::manual_seed(66);
  Tensor x = ls::randn({2, 5}, ls::requires_grad());
  const Tensor b = x.to(ls::kBFloat16);
  const Tensor y = b.to(ls::kFloat32).pow(3.0).sum();
  const Tensor g = ls::autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  CHECK(g.dtype() == ls::kFloat32);
  const Tensor bf = b.detach().to(ls::kFloat32);
  CHECK(ls::allclose(g.detach(), bf * bf * 3.0, 1e-2, 1e-2));
  const Tensor h = ls::autograd::grad({g.sum()}, {x})[0];
  CHECK(ls::allclose(h, bf * 6.0, 1e-2, 1e-2));
  CHECK_GRADGRADCHECK([](const Inputs& p) {  // float64 -> float64 through float32's range
    return (p[0] * p[0]).to(ls::kFloat32).to(ls::kFloat64).tanh();
  }, {randn64({3})}, 1e-3, 1e-3, 5e-2);
}

TEST_CASE("double backward: dropout_add equals dropout then add, in the incoming gradient") {
  // Both gradients are linear in the incoming gradient v: differentiate them in v and
  // compare with x + dropout(y) as two ops under the same mask.
  const ls::IntList shape{2, 3, 8};
  Tensor x = ls::randn(shape).requires_grad_(true);
  Tensor y = ls::randn(shape).to(ls::kBFloat16).requires_grad_(true);
  Tensor v = ls::randn(shape).requires_grad_(true);
  const Tensor u = ls::randn(shape);
  auto second = [&](bool fused) {
    ls::manual_seed(67);
    Tensor h;
    {
      ls::AutocastGuard amp(ls::kBFloat16);
      h = fused ? ls::autograd::dropout_add(x, y, 0.3) : x + ls::dropout(y, 0.3, true);
    }
    CHECK(h.grad_fn()->name() == (fused ? "DropoutAddBackward" : "AddBackward"));
    const std::vector<Tensor> g = ls::autograd::grad({h}, {x, y}, {v}, std::nullopt, true);
    const Tensor s = (g[0] * u).sum() + (g[1].to(ls::kFloat32) * u).sum();
    return ls::autograd::grad({s}, {v})[0];
  };
  const Tensor fused = second(true), plain = second(false);
  CHECK(ls::allclose(fused, plain, 1e-2, 1e-2));
  CHECK_FALSE(ls::allclose(fused, u));  // the dropout's part is there
}

TEST_CASE("double backward: linear under bf16 autocast equals a linear of its operands rounded to bf16") {
  // LinearAutocastBackward re-runs a float32 linear on its saved bf16 copies joined to its
  // inputs' edges (Note [Double backward by recomputation]); the same function written
  // with explicit roundings to bf16 around a float32 linear is the reference.
  ls::manual_seed(68);
  Tensor x = ls::randn({4, 3}, ls::requires_grad());
  Tensor w = ls::randn({5, 3}, ls::requires_grad());
  Tensor b = ls::randn({5}, ls::requires_grad());
  auto derivatives = [&](bool autocast) {
    Tensor y;  // (4, 5) bf16
    if (autocast) {
      ls::AutocastGuard amp(ls::kBFloat16);
      y = ls::linear(x, w, b);
      CHECK(y.grad_fn()->name() == "LinearAutocastBackward");
    } else {
      auto bf16 = [](const Tensor& t) { return t.to(ls::kBFloat16).to(ls::kFloat32); };
      y = ls::linear(bf16(x), bf16(w), bf16(b)).to(ls::kBFloat16);
    }
    const Tensor loss = y.to(ls::kFloat32).tanh().sum();
    const std::vector<Tensor> g = ls::autograd::grad({loss}, {x, w}, {}, std::nullopt, /*create_graph=*/true);
    const Tensor penalty = (g[0] * g[0]).sum() + (g[1] * g[1]).sum();
    const std::vector<Tensor> gg = ls::autograd::grad({penalty}, {x, w, b});
    return std::vector<Tensor>{g[0].detach(), g[1].detach(), gg[0], gg[1], gg[2]};
  };
  const std::vector<Tensor> amp = derivatives(true), plain = derivatives(false);
  for (size_t i = 0; i < plain.size(); ++i) {
    CAPTURE(i);
    REQUIRE(amp[i].defined());
    CHECK(amp[i].dtype() == ls::kFloat32);
    // The reference's casts round its gradients to bf16 on the way back (ToCopyBackward);
    // the node's stay float32: agreement to bf16's precision.
    CHECK(ls::allclose(amp[i], plain[i], 1e-2, 1e-2));
  }
  CHECK_FALSE(ls::allclose(amp[4], ls::zeros({5})));  // the bias's second derivative is there
  for (const Tensor& p : {x, w, b}) CHECK_FALSE(p.grad().defined());
}
