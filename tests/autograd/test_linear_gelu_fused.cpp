// tests/autograd/test_linear_gelu_fused.cpp — Note [linear + GELU in one node]: the
// fused node against its plain reference, linear under autocast followed by gelu, on
// the same operands: the output and the gradients of input, weight and bias must be
// the same bits (the same kernels run, in one node instead of two).
// Read before: autograd/functions/autocast_ops.h.
#include <doctest/doctest.h>

#include <vector>

#include "autograd/functions/autocast_ops.h"
#include "autograd/node.h"
#include "core/autocast.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "core/nn_ops.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace ls = lockstep;
namespace nv = lockstep::native;

namespace {

struct Operands {
  ls::Tensor x, w, b;  // float32 leaves: (4, 6, 16), (24, 16), (24)
};

Operands fresh_operands() {
  ls::manual_seed(47);
  Operands o{ls::randn({4, 6, 16}), ls::randn({24, 16}) * 0.3, ls::randn({24})};
  for (ls::Tensor* t : {&o.x, &o.w, &o.b}) t->requires_grad_(true);
  return o;
}

}  // namespace

TEST_CASE("linear + gelu fused: output and all three gradients equal linear then gelu") {
  Operands fused = fresh_operands(), plain = fresh_operands();
  const ls::Tensor g = ls::randn({4, 6, 24});
  ls::Tensor yf, yp;
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    REQUIRE(ls::autograd::fuses_linear_gelu(fused.x, fused.w, fused.b));
    yf = ls::autograd::linear_gelu_autocast(fused.x, fused.w, fused.b);
    yp = ls::linear(plain.x, plain.w, plain.b).gelu();
  }
  REQUIRE(yf.grad_fn() != nullptr);
  CHECK(yf.grad_fn()->name() == "LinearGeluAutocastBackward");
  CHECK(yp.grad_fn()->name() == "GeluBackward");
  CHECK(yf.dtype() == ls::kBFloat16);
  CHECK(nv::equal(yf.detach(), yp.detach()));
  yf.backward(g);
  yp.backward(g);
  CHECK(nv::equal(fused.x.grad(), plain.x.grad()));
  CHECK(nv::equal(fused.w.grad(), plain.w.grad()));
  CHECK(nv::equal(fused.b.grad(), plain.b.grad()));
  CHECK(fused.w.grad().dtype() == ls::kFloat32);
}

TEST_CASE("linear + gelu fused: without a bias, and with only the input requiring grad") {
  Operands fused = fresh_operands(), plain = fresh_operands();
  fused.w = fused.w.detach();
  plain.w = plain.w.detach();
  ls::Tensor yf, yp;
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    yf = ls::autograd::linear_gelu_autocast(fused.x, fused.w, ls::Tensor());
    yp = ls::linear(plain.x, plain.w, ls::Tensor()).gelu();
  }
  CHECK(nv::equal(yf.detach(), yp.detach()));
  yf.to(ls::kFloat32).sum().backward();
  yp.to(ls::kFloat32).sum().backward();
  CHECK(nv::equal(fused.x.grad(), plain.x.grad()));
  CHECK_FALSE(fused.w.grad().defined());
}

TEST_CASE("linear + gelu fused: not taken outside autocast, and shapes are checked") {
  Operands o = fresh_operands();
  CHECK_FALSE(ls::autograd::fuses_linear_gelu(o.x, o.w, o.b));
  ls::AutocastGuard amp(ls::kBFloat16);
  const ls::Tensor wrong = ls::randn({24, 15});
  CHECK_THROWS_AS(ls::autograd::linear_gelu_autocast(o.x, wrong, o.b), ls::Error);
}

// Note [linear's input gradient summed in place] (autograd/functions/autocast_ops.cpp).
TEST_CASE("linear under autocast sums dx into the waiting float32 gradient, no engine sum") {
  ls::manual_seed(48);
  ls::Tensor x = ls::randn({8, 16}).requires_grad_(true);
  const ls::Tensor w = ls::randn({24, 16}) * 0.3, b = ls::randn({24});
  const ls::Tensor gy = ls::randn({8, 24}), other = ls::randn({8, 16});
  ls::Tensor loss;
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    const ls::Tensor y = ls::linear(x, w, b);          // bf16 (8, 24)
    loss = (y.to(ls::kFloat32) * gy).sum() + (x * other).sum();  // x's second use runs first
  }
  ls::profiler::reset();
  ls::profiler::enable();
  loss.backward();
  ls::profiler::disable();
  for (const auto& e : ls::profiler::entries()) CHECK(e.name != "autograd.accumulate");
  // dx = round_bf16(gy) round_bf16(W) + other, in float64.
  const ls::Tensor g16 = gy.to(ls::kBFloat16).to(ls::kFloat64);
  const ls::Tensor w16 = w.to(ls::kBFloat16).to(ls::kFloat64);
  const ls::Tensor expect = ls::matmul(g16, w16) + other.to(ls::kFloat64);
  CHECK(x.grad().dtype() == ls::kFloat32);
  CHECK(nv::allclose(x.grad().to(ls::kFloat64), expect, 1e-5, 1e-5));
}
