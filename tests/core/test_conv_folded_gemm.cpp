// tests/core/test_conv_folded_gemm.cpp — Note [Small-output convolutions as
// batch-folded GEMMs]: the passes of layers whose output has under 16 pixels
// (DCGAN's 4x4 stride-2 7x7 -> 3x3 layer, 4x4 and 3x3 kernels covering the
// whole image, dilation, unequal strides and padding, one image or three, one
// thread or two) run as batch-folded GEMMs and match the reference backend
// (float32, relative error under 1e-5: the same products summed in another
// order); the input gradient summed in place; backward-weights from the
// forward's rows bitwise equal to rows built again; a weight written in place
// between calls read anew; and the layers the rule
// leaves to the primitives (4x4 outputs, a bias, few output channels, groups).
// Read before: core/native/fast/conv_folded_gemm.h.
#include <doctest/doctest.h>

#include "core/factory.h"
#include "core/native/conv_dispatch.h"
#include "core/native/fast/conv_onednn.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "tests/support/compare.h"

namespace ls = lockstep;
namespace native = lockstep::native;
using ls::IntList;
using ls::Tensor;
using lockstep::testing::relative_error;
using native::ConvBackend;
using native::ConvImpl;
using native::ConvPass;

namespace {

struct Layer {
  int64_t n, c_in, h, w, c_out, kh, kw;
  IntList stride, padding, dilation;
};

ConvImpl impl_of(const Layer& l, ConvPass pass, bool bias = false, int64_t groups = 1) {
  const Tensor x = ls::empty({l.n, l.c_in, l.h, l.w}, ls::kFloat32);
  const Tensor w = ls::empty({l.c_out, l.c_in / groups, l.kh, l.kw}, ls::kFloat32);
  const Tensor b = bias ? ls::empty({l.c_out}, ls::kFloat32) : Tensor();
  const native::ConvGeometry g = native::make_conv_geometry(x, w, b, l.stride, l.padding,
                                                            l.dilation, groups, "test");
  return native::choose_conv(g, ls::kFloat32, pass, bias);
}

}  // namespace

TEST_CASE("conv folded gemm: small outputs by batch-folded GEMMs match the reference backend") {
  const ConvBackend saved = native::conv_backend();
  const int saved_threads = ls::get_num_threads();
  ls::manual_seed(43);
  const Layer layers[] = {
      {3, 24, 7, 7, 32, 4, 4, {2, 2}, {1, 1}, {1, 1}},   // DCGAN's 128->256 shape: 3x3 out
      {1, 16, 4, 4, 20, 4, 4, {1, 1}, {0, 0}, {1, 1}},   // the kernel covers the image: 1x1 out
      {3, 18, 3, 3, 16, 3, 3, {1, 1}, {0, 0}, {1, 1}},   // 3x3 kernel on 3x3: 1x1 out
      {3, 16, 9, 7, 17, 3, 2, {3, 2}, {1, 0}, {2, 1}},   // dilated, unequal: 3x3 out
      {2, 16, 5, 8, 16, 2, 3, {2, 3}, {0, 1}, {1, 2}},   // 2x2 out, dilated in width
  };
  for (int threads : {1, 2}) {
    ls::set_num_threads(threads);
    for (const Layer& l : layers) {
      CAPTURE(threads);
      CAPTURE(l.c_in);
      CAPTURE(l.h);
      for (ConvPass pass : {ConvPass::Forward, ConvPass::BackwardData, ConvPass::BackwardWeights}) {
        CHECK(impl_of(l, pass) == ConvImpl::Im2rowFolded);
      }
      const Tensor x = ls::randn({l.n, l.c_in, l.h, l.w}), w = ls::randn({l.c_out, l.c_in, l.kh, l.kw});
      native::set_conv_backend(ConvBackend::Reference);
      const Tensor ry = native::conv2d_forward(x, w, {}, l.stride, l.padding, l.dilation, 1);
      const Tensor gy = ls::randn(ry.sizes());  // (N, C_out, oH, oW)
      auto [rx, rw, rb] = native::conv2d_backward(gy, x, w, l.stride, l.padding, l.dilation, 1,
                                                  true, true, false);
      native::set_conv_backend(ConvBackend::OneDNN);
      auto [y, ws] =
          native::conv2d_forward_training(x, w, {}, l.stride, l.padding, l.dilation, 1);
      CHECK(ws != nullptr);  // the rows, for backward-weights
      CHECK(relative_error(y, ry) < 1e-5);
      auto [gx, gw, gb] = native::conv2d_backward_with({Tensor(), ws}, gy, x, w, l.stride,
                                                       l.padding, l.dilation, 1, true, true, false);
      CHECK(relative_error(gx, rx) < 1e-5);
      CHECK(relative_error(gw, rw) < 1e-5);
      CHECK_FALSE(gb.defined());
      // Without the workspace: rows built again, the same gradient bit for bit.
      auto [only_x, no_w, no_b] = native::conv2d_backward(gy, x, w, l.stride, l.padding,
                                                          l.dilation, 1, true, false, false);
      auto [no_x, again_w, no_b2] = native::conv2d_backward(gy, x, w, l.stride, l.padding,
                                                            l.dilation, 1, false, true, false);
      CHECK(native::equal(only_x, gx));
      CHECK(native::equal(again_w, gw));
      CHECK_FALSE(no_w.defined());
      CHECK_FALSE(no_x.defined());
      // Note [Convolution gradients summed in place]: added to what the sum holds.
      const Tensor pending = ls::randn(x.sizes());
      const Tensor expected = native::add(pending, rx);
      auto [summed, sw, sb] = native::conv2d_backward_with(
          {native::clone(pending), nullptr}, gy, x, w, l.stride, l.padding, l.dilation, 1, true,
          false, false);
      CHECK(relative_error(summed, expected) < 1e-5);
    }
  }
  native::set_conv_backend(saved);
  ls::set_num_threads(saved_threads);
}

// The path keeps nothing of a weight between calls (it reads W as stored), so a
// weight written in place, as an optimizer step or load_state_dict writes it,
// is seen by the next call; this guards any cache added later.
TEST_CASE("conv folded gemm: a weight modified in place between calls is read anew") {
  const ConvBackend saved = native::conv_backend();
  ls::manual_seed(44);
  const Layer l{4, 16, 7, 7, 24, 4, 4, {2, 2}, {1, 1}, {1, 1}};
  CHECK(impl_of(l, ConvPass::Forward) == ConvImpl::Im2rowFolded);
  const Tensor x = ls::randn({l.n, l.c_in, l.h, l.w}), w = ls::randn({l.c_out, l.c_in, l.kh, l.kw});
  const Tensor gy = ls::randn({l.n, l.c_out, 3, 3});
  native::set_conv_backend(ConvBackend::OneDNN);
  const Tensor before = native::conv2d_forward(x, w, {}, l.stride, l.padding, l.dilation, 1);
  w.mul_(-0.5);                                  // in place, as an optimizer step
  w.copy_(native::add(w, ls::randn(w.sizes())));  // and a copy_ into it, as load_state_dict
  const Tensor after = native::conv2d_forward(x, w, {}, l.stride, l.padding, l.dilation, 1);
  auto [gx, gw, gb] = native::conv2d_backward(gy, x, w, l.stride, l.padding, l.dilation, 1, true,
                                              true, false);
  native::set_conv_backend(ConvBackend::Reference);
  const Tensor ref = native::conv2d_forward(x, w, {}, l.stride, l.padding, l.dilation, 1);
  auto [rx, rw, rb] = native::conv2d_backward(gy, x, w, l.stride, l.padding, l.dilation, 1, true,
                                              true, false);
  CHECK(relative_error(after, ref) < 1e-5);
  CHECK(relative_error(gx, rx) < 1e-5);
  CHECK(relative_error(gw, rw) < 1e-5);
  CHECK(relative_error(before, ref) > 0.1);  // the write changed the result
  native::set_conv_backend(saved);
}

TEST_CASE("conv folded gemm: layers outside the rule keep their implementations") {
  const ConvBackend saved = native::conv_backend();
  native::set_conv_backend(ConvBackend::OneDNN);
  const Layer four_by_four{2, 32, 7, 7, 32, 3, 3, {2, 2}, {1, 1}, {1, 1}};  // 4x4 out: P = 16
  const Layer three_by_three{2, 32, 7, 7, 32, 4, 4, {2, 2}, {1, 1}, {1, 1}};
  const Layer one_channel{2, 32, 3, 3, 1, 3, 3, {1, 1}, {0, 0}, {1, 1}};  // D's last layer
  for (ConvPass pass : {ConvPass::Forward, ConvPass::BackwardData, ConvPass::BackwardWeights}) {
    CHECK(impl_of(four_by_four, pass) != ConvImpl::Im2rowFolded);
    CHECK(impl_of(one_channel, pass) != ConvImpl::Im2rowFolded);
    CHECK(impl_of(three_by_three, pass, /*bias=*/false, /*groups=*/2) != ConvImpl::Im2rowFolded);
  }
  CHECK(impl_of(three_by_three, ConvPass::Forward, /*bias=*/true) != ConvImpl::Im2rowFolded);
  CHECK(impl_of(three_by_three, ConvPass::BackwardWeights, /*bias=*/true) !=
        ConvImpl::Im2rowFolded);
  native::set_conv_backend(ConvBackend::Reference);
  CHECK(impl_of(three_by_three, ConvPass::Forward) == ConvImpl::Im2colGemm);
  native::set_conv_backend(saved);
}
