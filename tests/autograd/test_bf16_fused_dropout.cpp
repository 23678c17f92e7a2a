// tests/autograd/test_bf16_fused_dropout.cpp — the dropouts fused into their
// neighbours' passes under bf16 autocast, each against its plain reference, the ops
// it replaces run one after the other with the same generator state (so the same
// mask): Note [linear + GELU + dropout in one node] against linear_gelu_autocast then
// dropout, Note [dropout + residual add + LayerNorm in one pass] against dropout_add
// then layer_norm and against x + dropout(y) then layer_norm outside autocast. The
// same arithmetic with the same roundings, so values and every gradient must agree bit
// for bit (tolerance 0); the profiler's bytes column must drop by exactly the tensors
// the fusion no longer writes and reads (Note [Profiler bytes]).
// Read before: autograd/functions/autocast_fused_dropout.h, core/native/fused_dropout.cpp.
#include <doctest/doctest.h>

#include <functional>

#include "autograd/functions/autocast_fused_dropout.h"
#include "autograd/functions/autocast_ops.h"
#include "autograd/node.h"
#include "core/autocast.h"
#include "core/autocast_offer.h"
#include "core/env_flag.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "core/nn_ops.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace ls = lockstep;
namespace nv = lockstep::native;

namespace {

ls::Tensor leaf(const ls::Tensor& t) { return t.detach().clone().requires_grad_(true); }

// The non-GEMM megabytes (1e6 bytes) the profiler counts while `run` runs.
double non_gemm_mb_of(const std::function<void()>& run) {
  ls::profiler::reset();
  ls::profiler::enable();
  run();
  ls::profiler::disable();
  return ls::profiler::non_gemm_mb(ls::profiler::entries());
}

struct Ffn {
  ls::Tensor x, w, b;  // float32 leaves: (4, 6, 16), (96, 16), (96)
};

Ffn ffn_operands() {
  ls::manual_seed(61);
  return Ffn{leaf(ls::randn({4, 6, 16})), leaf(ls::randn({96, 16}) * 0.3), leaf(ls::randn({96}))};
}

}  // namespace

TEST_CASE("linear + gelu + dropout fused equals linear + gelu then dropout: output and gradients") {
  Ffn fused = ffn_operands(), plain = ffn_operands();
  const ls::Tensor g = ls::randn({4, 6, 96}).to(ls::kBFloat16);
  ls::Tensor yf, yp;
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    REQUIRE(ls::autograd::fuses_linear_gelu_dropout(fused.x, fused.w, fused.b, 0.3, true));
    CHECK_FALSE(ls::autograd::fuses_linear_gelu_dropout(fused.x, fused.w, fused.b, 0.3, false));
    CHECK_FALSE(ls::autograd::fuses_linear_gelu_dropout(fused.x, fused.w, fused.b, 0.0, true));
    ls::manual_seed(62);
    yf = ls::autograd::linear_gelu_dropout_autocast(fused.x, fused.w, fused.b, 0.3);
    ls::manual_seed(62);  // the same key: the same mask
    yp = ls::dropout(ls::autograd::linear_gelu_autocast(plain.x, plain.w, plain.b), 0.3, true);
  }
  CHECK(yf.grad_fn()->name() == "LinearGeluDropoutAutocastBackward");
  CHECK(yp.grad_fn()->name() == "DropoutBackward");
  CHECK(yf.dtype() == ls::kBFloat16);
  // Something was dropped and something kept (p = 0.3 of 2304 elements).
  const double zeros = yf.detach().to(ls::kFloat32).eq(0.0).to(ls::kFloat32).mean().item<double>();
  CHECK(zeros > 0.2);
  CHECK(zeros < 0.45);
  CHECK(nv::equal(yf.detach(), yp.detach()));
  yf.backward(g);
  yp.backward(g);
  CHECK(nv::equal(fused.x.grad(), plain.x.grad()));
  CHECK(nv::equal(fused.w.grad(), plain.w.grad()));
  CHECK(nv::equal(fused.b.grad(), plain.b.grad()));
}

TEST_CASE("linear + gelu + dropout fused: p = 1 drops everything and a bad p is refused") {
  Ffn o = ffn_operands();
  ls::AutocastGuard amp(ls::kBFloat16);
  const ls::Tensor y = ls::autograd::linear_gelu_dropout_autocast(o.x, o.w, o.b, 1.0);
  CHECK(nv::allclose(y.detach().to(ls::kFloat32), ls::zeros({4, 6, 96}), 0.0, 0.0));
  y.to(ls::kFloat32).sum().backward();
  CHECK(nv::allclose(o.b.grad(), ls::zeros({96}), 0.0, 0.0));  // +0 or -0, no NaN
  CHECK_THROWS_WITH_AS(ls::autograd::linear_gelu_dropout_autocast(o.x, o.w, o.b, 1.5),
                       doctest::Contains("dropout probability"), ls::Error);
}

TEST_CASE("linear + gelu + dropout fused: the dropout's bytes leave the profile") {
  Ffn fused = ffn_operands(), plain = ffn_operands();
  const ls::Tensor g = ls::randn({4, 6, 96}).to(ls::kBFloat16);
  const double mb_fused = non_gemm_mb_of([&] {
    ls::AutocastGuard amp(ls::kBFloat16);
    ls::autograd::linear_gelu_dropout_autocast(fused.x, fused.w, fused.b, 0.1).backward(g);
  });
  const double mb_plain = non_gemm_mb_of([&] {
    ls::AutocastGuard amp(ls::kBFloat16);
    ls::dropout(ls::autograd::linear_gelu_autocast(plain.x, plain.w, plain.b), 0.1, true)
        .backward(g);
  });
  // The dropout of n = 2304 bf16 elements: forward read and wrote 2n bytes each,
  // backward read the gradient (2n) and the mask (n) and wrote 2n: 9n bytes.
  const double n = 4 * 6 * 96;
  CHECK(mb_plain - mb_fused == doctest::Approx(9 * n / 1e6).epsilon(1e-6));
}

namespace {

struct Residual {
  ls::Tensor x, y, w, b;  // x (4, 8, 64) f32, y bf16 of x's shape, w and b (64) f32: leaves
};

Residual residual_operands() {
  ls::manual_seed(63);
  return Residual{leaf(ls::randn({4, 8, 64}) * 2.0), leaf(ls::randn({4, 8, 64}).to(ls::kBFloat16)),
                  leaf(ls::randn({64}) * 0.5 + 1.0), leaf(ls::randn({64}) * 0.1)};
}

// layer_norm(x + dropout(y)) one way or another, with the generator at `seed`.
using ResidualNorm = std::function<ls::Tensor(const Residual&)>;
ls::Tensor run_residual(const Residual& r, const ResidualNorm& op, uint64_t seed) {
  ls::manual_seed(seed);
  return op(r);
}

void check_same_grads(const Residual& a, const Residual& b) {
  CHECK(nv::equal(a.x.grad(), b.x.grad()));
  CHECK(a.y.grad().dtype() == ls::kBFloat16);
  CHECK(nv::equal(a.y.grad(), b.y.grad()));
  CHECK(nv::equal(a.w.grad(), b.w.grad()));
  CHECK(nv::equal(a.b.grad(), b.b.grad()));
}

}  // namespace

TEST_CASE("dropout + add + layer_norm fused equals the ops apart: output and four gradients") {
  const ResidualNorm fused = [](const Residual& r) {
    ls::AutocastGuard amp(ls::kBFloat16);
    REQUIRE(ls::autograd::fuses_dropout_add_layer_norm(r.x, r.y, 0.1, true, r.w, r.b));
    CHECK_FALSE(ls::autograd::fuses_dropout_add_layer_norm(r.x, r.y, 0.1, false, r.w, r.b));
    return ls::autograd::dropout_add_layer_norm(r.x, r.y, 0.1, {64}, r.w, r.b, 1e-5);
  };
  const ResidualNorm two_ops = [](const Residual& r) {  // the previous fused path
    ls::AutocastGuard amp(ls::kBFloat16);
    return ls::layer_norm(ls::autograd::dropout_add(r.x, r.y, 0.1), {64}, r.w, r.b, 1e-5);
  };
  const ResidualNorm plain = [](const Residual& r) {  // no fusion, no autocast
    return ls::layer_norm(r.x + ls::dropout(r.y, 0.1, true), {64}, r.w, r.b, 1e-5);
  };
  Residual rf = residual_operands(), rt = residual_operands(), rp = residual_operands();
  const ls::Tensor g = ls::randn({4, 8, 64});
  const ls::Tensor out_f = run_residual(rf, fused, 64);
  const ls::Tensor out_t = run_residual(rt, two_ops, 64);
  const ls::Tensor out_p = run_residual(rp, plain, 64);
  CHECK(out_f.grad_fn()->name() == "DropoutAddLayerNormBackward");
  CHECK(out_t.grad_fn()->name() == "LayerNormBackward");
  CHECK(out_f.dtype() == ls::kFloat32);
  CHECK(nv::equal(out_f.detach(), out_t.detach()));
  CHECK(nv::equal(out_f.detach(), out_p.detach()));
  for (const ls::Tensor* out : {&out_f, &out_t, &out_p}) out->backward(g);
  check_same_grads(rf, rt);
  check_same_grads(rf, rp);
  // The edges: x, y, then the LayerNorm's weight and bias, as LayerNormBackward had them.
  const auto& edges = out_f.grad_fn()->next_edges();
  REQUIRE(edges.size() == 4);
  for (const auto& e : edges) CHECK(e.function->name() == "AccumulateGrad");
}

TEST_CASE("dropout + add + layer_norm fused: without affine parameters and with y alone needing grad") {
  Residual fused = residual_operands(), plain = residual_operands();
  for (Residual* r : {&fused, &plain}) r->x = r->x.detach();
  ls::manual_seed(65);
  ls::Tensor out_f;
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    out_f = ls::autograd::dropout_add_layer_norm(fused.x, fused.y, 0.5, {64}, ls::Tensor(),
                                                 ls::Tensor(), 1e-5);
  }
  ls::manual_seed(65);
  const ls::Tensor out_p = ls::layer_norm(plain.x + ls::dropout(plain.y, 0.5, true), {64},
                                          ls::Tensor(), ls::Tensor(), 1e-5);
  CHECK(nv::equal(out_f.detach(), out_p.detach()));
  const ls::Tensor g = ls::randn({4, 8, 64});
  out_f.backward(g);
  out_p.backward(g);
  CHECK_FALSE(fused.x.grad().defined());
  CHECK(nv::equal(fused.y.grad(), plain.y.grad()));
}

TEST_CASE("dropout + add + layer_norm fused: wrong operands are refused with the op's name") {
  Residual r = residual_operands();
  ls::AutocastGuard amp(ls::kBFloat16);
  CHECK_THROWS_WITH_AS(
      ls::autograd::dropout_add_layer_norm(r.x, r.y, 0.1, {32}, r.w, r.b, 1e-5),
      doctest::Contains("dropout_add_layer_norm: normalized_shape"), ls::Error);
  const ls::Tensor y32 = r.y.detach().to(ls::kFloat32);
  CHECK_FALSE(ls::autograd::fuses_dropout_add_layer_norm(r.x, y32, 0.1, true, r.w, r.b));
  CHECK_THROWS_WITH_AS(ls::autograd::dropout_add_layer_norm(r.x, y32, 0.1, {64}, r.w, r.b, 1e-5),
                       doctest::Contains("y must be a bfloat16"), ls::Error);
}

TEST_CASE("dropout + add + layer_norm fused: fewer bytes than the two ops and the cast") {
  Residual fused = residual_operands(), apart = residual_operands();
  const ls::Tensor w1 = ls::randn({48, 64}) * 0.1;  // the next linear's weight (64 -> 48)
  const ls::Tensor g = ls::randn({4, 8, 48}).to(ls::kBFloat16);
  const double mb_fused = non_gemm_mb_of([&] {
    ls::AutocastGuard amp(ls::kBFloat16);
    const ls::Tensor h =
        ls::autograd::dropout_add_layer_norm(fused.x, fused.y, 0.1, {64}, fused.w, fused.b, 1e-5);
    ls::linear(h, w1, ls::Tensor()).backward(g);
  });
  const double mb_apart = non_gemm_mb_of([&] {
    ls::AutocastGuard amp(ls::kBFloat16);
    const ls::Tensor h =
        ls::layer_norm(ls::autograd::dropout_add(apart.x, apart.y, 0.1), {64}, apart.w, apart.b, 1e-5);
    ls::linear(h, w1, ls::Tensor()).backward(g);
  });
  // n float32 elements of h: forward no longer reads h (4n bytes; it still writes it
  // for backward); backward no longer reads dL/dh again (4n) nor the mask (n): 9n.
  // With the bf16 copy written in the pass (2n) the linear's cast is gone (4n + 2n): 13n.
  const bool copy = ls::env_flag("LOCKSTEP_BF16_NORM_WRITES_CAST", true);
  const double n = 4 * 8 * 64;
  CHECK(mb_apart - mb_fused == doctest::Approx((copy ? 13 : 9) * n / 1e6).epsilon(1e-6));
  CHECK(fused.w.grad().defined());
}

// Note [bf16 copies written by the op that made the activation] (core/autocast_offer.h).
TEST_CASE("dropout + add + layer_norm fused: the next cast takes the bf16 copy written in the pass") {
  const bool copy = ls::env_flag("LOCKSTEP_BF16_NORM_WRITES_CAST", true);  // the A/B switch
  Residual r = residual_operands();
  ls::AutocastGuard amp(ls::kBFloat16);
  const ls::Tensor h = ls::autograd::dropout_add_layer_norm(r.x, r.y, 0.1, {64}, r.w, r.b, 1e-5);
  CHECK(ls::autocast::offered_cast_count() == (copy ? 1u : 0u));
  const ls::Tensor h16 = ls::autocast::cached_cast(h, ls::kBFloat16);
  CHECK(ls::autocast::offered_cast_count() == 0u);  // used up
  CHECK(h16.dtype() == ls::kBFloat16);
  CHECK(nv::equal(h16, nv::to_dtype(h.detach(), ls::kBFloat16)));  // the cast's bits
  // A second cast converts again; a tensor changed in place is not given a stale copy.
  CHECK(nv::equal(ls::autocast::cached_cast(h, ls::kBFloat16), h16));
  ls::Tensor k = ls::autograd::dropout_add_layer_norm(r.x.detach(), r.y.detach(), 0.1, {64},
                                                      r.w.detach(), r.b.detach(), 1e-5);
  k.mul_(2.0);
  CHECK(nv::equal(ls::autocast::cached_cast(k, ls::kBFloat16), nv::to_dtype(k, ls::kBFloat16)));
}
