// tests/cuda/test_cuda_autocast.cpp — bf16 autocast on CUDA tensors (Note [Autocast
// on CUDA] in core/cuda/autocast_kernels.cu) against the CPU's autocast and the
// float32 reference: output and gradient dtypes (bf16 outputs, float32 weight
// gradients), linear, conv2d, matmul, the cast cache, batch norm on bf16, the
// elementwise ops on bf16, and a SmallCNN and a tiny BERT step. Skipped without a
// GPU (Note [Skipping gpu tests]).
//
// Tolerances (relative, max |got - want| / max |want|; estimates, not measured on
// a GPU yet): kSameBf16 = 1e-2 where both sides round the same float32 sums to
// bf16 (one bf16 ulp is 2^-8 = 0.4%: a different summation order may flip one
// rounding); kSameF32 = 1e-4 for float32 results of the same bf16 operands;
// kVsFloat32 = 3e-2 against the float32 op; for a whole model's gradients kStep =
// 0.1 (bf16 errors compound through the layers; a lost or mis-scaled gradient is
// off by far more) and kThroughPools = 0.25 for the SmallCNN's convolutions, whose
// gradients pass two max-pools: a one-ulp difference in a conv output can move a
// window's argmax. For scale, the CPU's autocast against its float32 step (measured
// here, same seeds): tiny BERT 9e-3 at most; SmallCNN 7-8e-2 for the conv weights,
// 1.2e-2 for fc1 and 4e-3 for fc2; linear, conv2d, matmul, batch norm 1-5e-3.
// Read before: tests/cuda/test_cuda_nn.cpp, tests/core/test_autocast.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/autocast.h"
#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/native/native.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "models/bert.h"
#include "models/small_cnn.h"
#include "tests/cuda/cuda_test_util.h"

namespace {

constexpr double kSameBf16 = 1e-2, kSameF32 = 1e-4, kVsFloat32 = 3e-2, kStep = 0.1,
                 kThroughPools = 0.25;

Tensor host64(const Tensor& t) {
  return ls::native::to_dtype(ls::native::to_device(t, ls::Device::cpu()), ls::kFloat64);
}

// max |got - want| / max |want| (0 / 0 is 0), both read on the host in float64.
double rel_diff(const Tensor& got, const Tensor& want) {
  REQUIRE(got.defined());
  REQUIRE(want.defined());
  REQUIRE(got.sizes() == want.sizes());
  const Tensor a = host64(got), b = host64(want);
  const double diff = (a - b).abs().max().item<double>();
  const double scale = b.abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

Tensor leaf(const Tensor& t) {
  Tensor out = t.detach().clone();
  out.requires_grad_(true);
  return out;
}

// sum(y * r) with r random and fixed: dL/dy = r (converted to y's dtype by .to's backward).
Tensor weighted_sum(const Tensor& y, const Tensor& r) { return (y.to(ls::kFloat32) * r).sum(); }

}  // namespace

TEST_CASE("CUDA autocast linear: bf16 out, float32 dW/db, dX in the input's dtype, equal to the CPU's") {
  ls::manual_seed(1);
  const Tensor x = ls::randn({2, 9, 24}), w = ls::randn({16, 24}) * 0.2, b = ls::randn({16});
  const Tensor r = ls::randn({2, 9, 16});
  for (ls::ScalarType in_dtype : {ls::kFloat32, ls::kBFloat16}) {
    CAPTURE(in_dtype);
    Tensor cx = leaf(ls::native::to_dtype(x, in_dtype)), cw = leaf(w), cb = leaf(b);
    Tensor gx = leaf(on_cuda(cx)), gw = leaf(on_cuda(w)), gb = leaf(on_cuda(b));
    Tensor cy, gy;
    {
      ls::AutocastGuard amp(ls::kBFloat16);
      cy = ls::linear(cx, cw, cb);
      gy = ls::linear(gx, gw, gb);
    }
    CHECK(gy.dtype() == ls::kBFloat16);
    CHECK(gy.device() == cuda0());
    CHECK(rel_diff(gy, cy) <= kSameBf16);
    CHECK(rel_diff(gy, ls::linear(x, w, b)) <= kVsFloat32);  // the float32 op
    weighted_sum(cy, r).backward();
    weighted_sum(gy, on_cuda(r)).backward();
    CHECK(gw.grad().dtype() == ls::kFloat32);
    CHECK(gb.grad().dtype() == ls::kFloat32);
    CHECK(gx.grad().dtype() == in_dtype);
    CHECK(rel_diff(gw.grad(), cw.grad()) <= kSameF32);
    CHECK(rel_diff(gb.grad(), cb.grad()) <= kSameF32);
    CHECK(rel_diff(gx.grad(), cx.grad()) <= (in_dtype == ls::kBFloat16 ? kSameBf16 : kSameF32));
  }
}

TEST_CASE("CUDA autocast conv2d forward and backward against the CPU's autocast and float32") {
  struct Case {
    IntList x, w, stride, padding;
    int64_t groups;
  };
  for (const Case& c : {Case{{4, 3, 10, 10}, {8, 3, 3, 3}, {1, 1}, {1, 1}, 1},
                        Case{{2, 8, 9, 9}, {6, 4, 3, 3}, {2, 2}, {0, 0}, 2},
                        Case{{2, 16, 7, 7}, {32, 16, 1, 1}, {1, 1}, {0, 0}, 1}}) {
    CAPTURE(c.groups);
    ls::manual_seed(2);
    const Tensor x = ls::randn(c.x), w = ls::randn(c.w) * 0.3, b = ls::randn({c.w[0]});
    Tensor cx = leaf(x), cw = leaf(w), cb = leaf(b);
    Tensor gx = leaf(on_cuda(x)), gw = leaf(on_cuda(w)), gb = leaf(on_cuda(b));
    Tensor cy, gy;
    {
      ls::AutocastGuard amp(ls::kBFloat16);
      cy = ls::conv2d(cx, cw, cb, c.stride, c.padding, {1, 1}, c.groups);
      gy = ls::conv2d(gx, gw, gb, c.stride, c.padding, {1, 1}, c.groups);
    }
    REQUIRE(gy.sizes() == cy.sizes());
    CHECK(gy.dtype() == ls::kBFloat16);
    // The GPU adds the float32 bias after rounding (two roundings): two ulps.
    CHECK(rel_diff(gy, cy) <= 2 * kSameBf16);
    CHECK(rel_diff(gy, ls::conv2d(x, w, b, c.stride, c.padding, {1, 1}, c.groups)) <= kVsFloat32);
    const Tensor r = ls::randn(cy.sizes());
    weighted_sum(cy, r).backward();
    weighted_sum(gy, on_cuda(r)).backward();
    CHECK(gw.grad().dtype() == ls::kFloat32);  // master weights
    CHECK(gb.grad().dtype() == ls::kFloat32);
    CHECK(gx.grad().dtype() == ls::kFloat32);  // the input's dtype
    // dW and dX are rounded to bf16 by cuDNN before widening: bf16 tolerance.
    CHECK(rel_diff(gw.grad(), cw.grad()) <= kSameBf16);
    CHECK(rel_diff(gx.grad(), cx.grad()) <= kSameBf16);
    CHECK(rel_diff(gb.grad(), cb.grad()) <= kSameF32);
  }
}

TEST_CASE("CUDA autocast matmul and bmm compute in bf16 and match the CPU's") {
  ls::manual_seed(3);
  const Tensor a = ls::randn({2, 3, 5, 7}), b = ls::randn({2, 3, 7, 4});
  Tensor ca = leaf(a), cb = leaf(b), ga = leaf(on_cuda(a)), gb = leaf(on_cuda(b));
  Tensor cy, gy, gbmm, cbmm;
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    cy = ca.matmul(cb.transpose(2, 3).transpose(2, 3));  // a strided view as an operand
    gy = ga.matmul(gb.transpose(2, 3).transpose(2, 3));
    cbmm = ls::native::bmm(ls::native::to_dtype(a.reshape({6, 5, 7}), ls::kBFloat16),
                           ls::native::to_dtype(b.reshape({6, 7, 4}), ls::kBFloat16));
    gbmm = ls::native::bmm(on_cuda(ls::native::to_dtype(a.reshape({6, 5, 7}), ls::kBFloat16)),
                           on_cuda(ls::native::to_dtype(b.reshape({6, 7, 4}), ls::kBFloat16)));
  }
  CHECK(gy.dtype() == ls::kBFloat16);
  CHECK(gbmm.dtype() == ls::kBFloat16);
  CHECK(rel_diff(gy, cy) <= kSameBf16);
  CHECK(rel_diff(gbmm, cbmm) <= kSameBf16);
  CHECK(rel_diff(gy, a.matmul(b)) <= kVsFloat32);
  const Tensor r = ls::randn({2, 3, 5, 4});
  weighted_sum(cy, r).backward();
  weighted_sum(gy, on_cuda(r)).backward();
  CHECK(ga.grad().dtype() == ls::kFloat32);  // Tensor::to's backward widens
  CHECK(rel_diff(ga.grad(), ca.grad()) <= kSameBf16);
  CHECK(rel_diff(gb.grad(), cb.grad()) <= kSameBf16);
}

TEST_CASE("CUDA autocast: the cast cache holds a CUDA parameter's bf16 copy once per guard") {
  ls::manual_seed(4);
  Tensor w = leaf(on_cuda(ls::randn({16, 24})));
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    const Tensor a = ls::autocast::cached_cast(w, ls::kBFloat16);
    const Tensor b = ls::autocast::cached_cast(w, ls::kBFloat16);
    CHECK(a.device() == cuda0());
    CHECK(a.dtype() == ls::kBFloat16);
    CHECK(a.raw_data() == b.raw_data());  // one conversion
    CHECK(ls::autocast::cache_size() == 1);
    const Tensor t = ls::autocast::cached_cast_transposed(w, ls::kBFloat16);
    CHECK(t.sizes() == IntList{24, 16});
    CHECK(t.is_contiguous());
    CHECK(rel_diff(t, ls::native::transpose(a, 0, 1)) == 0.0);
    {
      ls::NoGradGuard no_grad;
      w.mul_(2.0);  // an optimizer-like in-place update bumps the version
    }
    const Tensor c = ls::autocast::cached_cast(w, ls::kBFloat16);
    CHECK(c.raw_data() != a.raw_data());
    CHECK(rel_diff(c, ls::native::binary_scalar(ls::native::BinaryOp::Mul, a, 2.0)) == 0.0);
  }
  CHECK(ls::autocast::cache_size() == 0);
}

TEST_CASE("CUDA batch norm on bf16 activations: bf16 out and dX, float32 statistics and dW, db") {
  ls::manual_seed(5);
  const Tensor x = ls::native::to_dtype(ls::randn({4, 6, 5, 5}) * 2.0 + 1.0, ls::kBFloat16);
  const Tensor w = ls::randn({6}), b = ls::randn({6}), r = ls::randn({4, 6, 5, 5});
  for (bool relu : {false, true}) {
    CAPTURE(relu);
    Tensor cx = leaf(x), cw = leaf(w), cb = leaf(b), crm = ls::zeros({6}), crv = ls::ones({6});
    Tensor gx = leaf(on_cuda(x)), gw = leaf(on_cuda(w)), gb = leaf(on_cuda(b));
    Tensor grm = on_cuda(crm), grv = on_cuda(crv);
    Tensor cy, gy;
    {
      ls::AutocastGuard amp(ls::kBFloat16);
      cy = relu ? ls::batch_norm_relu(cx, cw, cb, crm, crv, true, 0.1, 1e-5)
                : ls::batch_norm(cx, cw, cb, crm, crv, true, 0.1, 1e-5);
      gy = relu ? ls::batch_norm_relu(gx, gw, gb, grm, grv, true, 0.1, 1e-5)
                : ls::batch_norm(gx, gw, gb, grm, grv, true, 0.1, 1e-5);
    }
    CHECK(gy.dtype() == ls::kBFloat16);
    CHECK(grm.dtype() == ls::kFloat32);
    CHECK(rel_diff(gy, cy) <= kSameBf16);
    CHECK(rel_diff(grm, crm) <= kSameF32);
    CHECK(rel_diff(grv, crv) <= kSameF32);
    weighted_sum(cy, r).backward();
    weighted_sum(gy, on_cuda(r)).backward();
    CHECK(gx.grad().dtype() == ls::kBFloat16);
    CHECK(gw.grad().dtype() == ls::kFloat32);
    CHECK(rel_diff(gx.grad(), cx.grad()) <= kSameBf16);
    CHECK(rel_diff(gw.grad(), cw.grad()) <= 1e-3);
    CHECK(rel_diff(gb.grad(), cb.grad()) <= 1e-3);
  }
}

TEST_CASE("CUDA bf16 elementwise, pooling and dropout compute in float and round once, as the CPU") {
  ls::manual_seed(6);
  const Tensor a = ls::native::to_dtype(ls::randn({2, 4, 8, 8}), ls::kBFloat16);
  const Tensor b = ls::native::to_dtype(ls::randn({2, 4, 8, 8}), ls::kBFloat16);
  const Tensor ga = on_cuda(a), gb = on_cuda(b);
  ls::AutocastGuard amp(ls::kBFloat16);
  // Exact ops and single roundings of the same float: bit-identical.
  check_matches(ga.relu(), a.relu(), 0.0, 0.0);
  check_matches(ga + gb, a + b, 0.0, 0.0);
  check_matches(ga * gb, a * b, 0.0, 0.0);
  check_matches(ga * 0.125, a * 0.125, 0.0, 0.0);
  check_matches(ls::max_pool2d(ga, {2, 2}, {2, 2}), ls::max_pool2d(a, {2, 2}, {2, 2}), 0.0, 0.0);
  check_matches(ls::add_relu(ga, gb), (a + b).relu(), 0.0, 0.0);  // the CPU's is float-only
  // libdevice's erf and the CPU's differ by ulps of float: one bf16 ulp at most.
  CHECK(ga.gelu().dtype() == ls::kBFloat16);
  CHECK(rel_diff(ga.gelu(), a.gelu()) <= kSameBf16);
  CHECK(rel_diff(ls::adaptive_avg_pool2d(ga, {1, 1}), ls::adaptive_avg_pool2d(a, {1, 1})) <=
        kSameBf16);
  // Mixed bf16 + float32 promotes to float32.
  CHECK((ga + on_cuda(ls::randn({2, 4, 8, 8}))).dtype() == ls::kFloat32);
  // The policy's float32 ops take bf16 in and return float32.
  CHECK(ga.softmax(-1).dtype() == ls::kFloat32);
  CHECK(rel_diff(ga.softmax(-1), a.softmax(-1)) <= kSameF32);
  // Dropout: the CPU's mask for the same seed, x * 2 rounded once.
  ls::manual_seed(60);
  const Tensor cd = ls::dropout(a, 0.5, true);
  ls::manual_seed(60);
  const Tensor gd = ls::dropout(ga, 0.5, true);
  CHECK(gd.dtype() == ls::kBFloat16);
  check_matches(gd, cd, 0.0, 0.0);
}

namespace {

// One forward + backward under autocast of `cpu` and its CUDA copy `gpu` (same
// parameters); checks the loss, that every gradient is float32 and that parameter
// i's gradient matches the CPU's within tolerance(i).
template <class Model, class Loss, class Tolerance>
void check_step(Model& cpu, Model& gpu, Loss loss_of, Tolerance tolerance) {
  Tensor closs, gloss;
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    ls::manual_seed(77);  // the same dropout masks on both devices
    closs = loss_of(cpu, false);
    ls::manual_seed(77);
    gloss = loss_of(gpu, true);
  }
  REQUIRE(gloss.dtype() == ls::kFloat32);
  CHECK(rel_diff(gloss, closs) <= kSameBf16);
  closs.backward();
  gloss.backward();
  const auto cps = cpu.parameters(), gps = gpu.parameters();
  REQUIRE(cps.size() == gps.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    CAPTURE(i);
    REQUIRE(gps[i].grad().defined());
    CHECK(gps[i].grad().dtype() == ls::kFloat32);
    CHECK(gps[i].grad().device() == cuda0());
    CHECK(rel_diff(gps[i].grad(), cps[i].grad()) <= tolerance(i));
  }
}

}  // namespace

TEST_CASE("CUDA autocast SmallCNN step: loss and float32 gradients match the CPU's autocast") {
  ls::manual_seed(8);
  auto cpu = std::make_shared<ls::models::SmallCNN>();
  ls::manual_seed(8);
  auto gpu = std::make_shared<ls::models::SmallCNN>();
  gpu->to(cuda0());
  const Tensor x = ls::randn({8, 1, 28, 28}), y = ls::randint(0, 10, {8});
  check_step(*cpu, *gpu, [&](ls::models::SmallCNN& m, bool on_gpu) {
    const Tensor logits = m.forward(on_gpu ? on_cuda(x) : x);  // (8, 10) bf16
    CHECK(logits.dtype() == ls::kBFloat16);
    return ls::cross_entropy(logits, on_gpu ? on_cuda(y) : y);
  }, [](size_t i) { return i < 4 ? kThroughPools : 3 * kSameBf16; });  // conv1, conv2 | fc1, fc2
}

TEST_CASE("CUDA autocast tiny BERT step: loss and float32 gradients match the CPU's autocast") {
  const ls::models::BertConfig config = ls::models::BertConfig::tiny();
  ls::manual_seed(9);
  auto cpu = std::make_shared<ls::models::Bert>(config);
  ls::manual_seed(9);
  auto gpu = std::make_shared<ls::models::Bert>(config);
  gpu->to(cuda0());
  cpu->train();
  gpu->train();
  const Tensor ids = ls::randint(0, config.vocab_size, {2, 16});
  check_step(*cpu, *gpu, [&](ls::models::Bert& m, bool on_gpu) {
    const Tensor t = on_gpu ? on_cuda(ids) : ids;
    const Tensor logits = m.forward(t);  // (2, 16, vocab) bf16
    CHECK(logits.dtype() == ls::kBFloat16);
    return ls::cross_entropy(logits.reshape({-1, config.vocab_size}), t.reshape({-1}));
  }, [](size_t) { return kStep; });
}
