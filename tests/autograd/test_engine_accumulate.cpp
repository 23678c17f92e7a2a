// tests/autograd/test_engine_accumulate.cpp — Note [Gradients summed in place]
// (autograd/engine.cpp): when a gradient reaches a node along two edges, the
// engine adds into whichever of the two tensors nobody else can see, and copies
// when both are shared. Each case checks the gradient against its formula and
// that tensors the caller or another edge still holds are left unchanged.
// Convolutions add their input gradient into the waiting one themselves (Note
// [Convolution gradients summed in place] in core/native/fast/conv_onednn.h): every
// backward-data path (1x1 GEMM at stride 1 and 2, batch-folded 1x1, oneDNN's
// primitive, the float64 reference) against a separately computed sum.
// Read before: autograd/engine.h.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "core/autocast.h"
#include "core/factory.h"
#include "core/native/fast/gemm_bf16_avx2.h"
#include "core/native/fast/onednn_engine.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "core/profiler.h"
#include "core/tensor.h"

namespace ls = lockstep;

TEST_CASE("engine accumulate: fresh gradients from two branches are summed in place, correctly") {
  // u feeds exp and tanh: two fresh gradients meet at u's node.
  const std::vector<float> xs{0.1f, -0.7f, 1.3f, 2.0f};
  ls::Tensor x = ls::tensor(xs, {4}, ls::requires_grad());
  ls::Tensor u = x * 2.0;
  ls::profiler::reset();
  ls::profiler::enable();
  (u.exp() + u.tanh() * 3.0).sum().backward();
  ls::profiler::disable();
  bool summed = false;
  for (const auto& e : ls::profiler::entries()) summed |= e.name == "autograd.accumulate";
  CHECK(summed);  // the two gradients did meet
  const std::vector<float> g = x.grad().to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double t = std::tanh(2.0 * xs[i]);
    CHECK(g[i] == doctest::Approx(2.0 * (std::exp(2.0 * xs[i]) + 3.0 * (1.0 - t * t)))
                      .epsilon(1e-5));
  }
}

TEST_CASE("engine accumulate: one gradient tensor sent along two edges is not overwritten") {
  // y + y: AddBackward hands the same tensor to both edges; a view of it takes a third path.
  ls::Tensor a = ls::tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, ls::requires_grad());
  ls::Tensor y = a * 3.0;
  ls::Tensor z = y + y + y.reshape({3, 2}).reshape({2, 3}) * 2.0;  // d/da = 3 (1 + 1 + 2) = 12
  z.sum().backward();
  for (float v : a.grad().to_vector<float>()) CHECK(v == 12.0f);
}

TEST_CASE("engine accumulate: the caller's seed gradients are left as they were") {
  ls::Tensor a = ls::tensor(std::vector<float>{1, 2}, {2}, ls::requires_grad());
  ls::Tensor y = a * 5.0;
  ls::Tensor seed = ls::tensor(std::vector<float>{1, 10}, {2});
  // y twice as a root: both seeds reach y's node, and the caller holds them.
  ls::autograd::backward({y, y}, {seed, seed});
  CHECK(seed.to_vector<float>() == std::vector<float>{1, 10});
  CHECK(a.grad().to_vector<float>() == std::vector<float>{10, 100});
}

namespace {

bool profiled(const std::string& name) {
  for (const auto& e : ls::profiler::entries()) {
    if (e.name == name) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("engine accumulate: a convolution adds its input gradient into the pending one") {
  struct Case {
    int64_t c_in, hw, c_out, k, stride, pad;
    ls::ScalarType dtype;
  };
  const std::vector<Case> cases = {
      {16, 20, 24, 1, 1, 0, ls::kFloat32},  // 1x1 stride 1: the GEMM's beta = 1
      {16, 21, 24, 1, 2, 0, ls::kFloat32},  // strided 1x1: scatter adds
      {16, 7, 24, 1, 1, 0, ls::kFloat32},   // 1x1 on 49 pixels: batch-folded GEMM
      {16, 12, 24, 3, 1, 1, ls::kFloat32},  // oneDNN's primitive, then a scratch add
      {5, 9, 6, 3, 2, 1, ls::kFloat64},     // the reference: col2im adds
  };
  ls::manual_seed(3);
  for (const Case& c : cases) {
    CAPTURE(c.k);
    CAPTURE(c.stride);
    CAPTURE(c.hw);
    const ls::TensorOptions opt = ls::TensorOptions().dtype(c.dtype);
    ls::Tensor x0 = ls::randn({2, c.c_in, c.hw, c.hw}, opt);
    ls::Tensor w = ls::randn({c.c_out, c.c_in, c.k, c.k}, opt);
    ls::Tensor x = x0.detach();
    x.requires_grad_();
    ls::Tensor u = x * 1.5;  // u's node receives two gradients
    ls::Tensor conv = ls::conv2d(u, w, {}, {c.stride}, {c.pad}, {1}, 1);
    ls::Tensor shortcut = u * 2.0;  // created later: its gradient arrives first
    ls::Tensor gy = ls::randn(conv.sizes(), opt);
    ls::profiler::reset();
    ls::profiler::enable();
    ((conv * gy).sum() + shortcut.sum()).backward();
    ls::profiler::disable();
    CHECK_FALSE(profiled("autograd.accumulate"));  // the convolution did the sum
    auto [gu, gw, gb] = ls::native::conv2d_backward(gy, x0 * 1.5, w, {c.stride}, {c.pad}, {1}, 1,
                                                    true, false, false);
    const std::vector<double> want = ((gu + 2.0) * 1.5).to_vector<double>();
    const std::vector<double> got = x.grad().to_vector<double>();
    REQUIRE(got.size() == want.size());
    double err = 0;
    for (size_t i = 0; i < got.size(); ++i) err = std::max(err, std::abs(got[i] - want[i]));
    CHECK(err < (c.dtype == ls::kFloat32 ? 1e-4 : 1e-12));
    CHECK(w.grad().defined() == false);  // w does not require grad
  }
  ls::profiler::reset();
}

TEST_CASE("engine accumulate: under bf16 autocast a 1x1 convolution adds its input gradient in its GEMM") {
  // Note [bf16 convolution gradients summed in place] (core/native/conv_bf16.h):
  // a channels-last bf16 activation feeds a stride-1 1x1 convolution and a
  // shortcut, as a ResNet block's input does. The convolution's GEMM sums dx into
  // the shortcut's gradient (no separate pass); a strided 1x1 layer cannot, and the
  // engine adds. Both against the sum computed separately.
  for (int64_t stride : {1, 2}) {
    CAPTURE(stride);
    ls::manual_seed(4);
    ls::Tensor x0 = ls::native::channels_last(ls::native::to_dtype(ls::randn({2, 16, 6, 6}), ls::kBFloat16));
    ls::Tensor w = ls::randn({24, 16, 1, 1});
    ls::Tensor x = x0.detach();
    x.requires_grad_();
    ls::Tensor conv, shortcut, gy;
    {
      ls::AutocastGuard amp(ls::kBFloat16);
      ls::Tensor u = x * 1.5;  // bf16, channels-last: u's node receives two gradients
      conv = ls::conv2d(u, w, {}, {stride}, {0}, {1}, 1);
      shortcut = u * 2.0;  // created later: its gradient arrives first
    }
    REQUIRE(ls::native::is_channels_last(conv));
    gy = ls::native::channels_last(ls::native::to_dtype(ls::randn(conv.sizes()), ls::kBFloat16));
    ls::profiler::reset();
    ls::profiler::enable();
    // The shortcut's gradient channels-last too, as BatchNormAddRelu's residual gradient is.
    const ls::Tensor gs = ls::native::channels_last(ls::randn(shortcut.sizes()));
    ((conv.to(ls::kFloat32) * gy.to(ls::kFloat32)).sum() + (shortcut.to(ls::kFloat32) * gs).sum())
        .backward();
    ls::profiler::disable();
    // Without oneDNN bf16 kernels the layer is still a GEMM where the build has the
    // AVX2 one (Note [bf16 GEMM in AVX2 registers]); without either it runs in
    // float32 (Note [bf16 without oneDNN kernels]) and the engine sums at every stride.
    const bool gemm_1x1 =
        ls::native::onednn_detail::has_bf16() || ls::native::detail::gemm_bf16_avx2_available();
    CHECK(profiled("autograd.accumulate") == (stride != 1 || !gemm_1x1));
    auto [gu, gw, gb] = ls::native::conv2d_backward(
        gy.to(ls::kFloat32), ls::native::to_dtype(x0 * 1.5, ls::kFloat32),
        ls::native::to_dtype(ls::native::to_dtype(w, ls::kBFloat16), ls::kFloat32), {stride}, {0},
        {1}, 1, true, false, false);
    const ls::Tensor gs16 = ls::native::to_dtype(ls::native::to_dtype(gs, ls::kBFloat16), ls::kFloat32);
    const std::vector<float> want = ls::native::contiguous((gu + gs16 * 2.0) * 1.5).to_vector<float>();
    const std::vector<float> got = ls::native::contiguous(x.grad().to(ls::kFloat32)).to_vector<float>();
    REQUIRE(got.size() == want.size());
    double err = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err = std::max(err, std::abs(double(got[i]) - want[i]));
      scale = std::max(scale, std::abs(double(want[i])));
    }
    CHECK(err < 2e-2 * scale);  // a few bf16 roundings of the sum
  }
  ls::profiler::reset();
}
