// tests/core/test_conv_workspace.cpp — Note [Convolution workspace]: the
// forward's blocked input is kept for backward-weights where the layouts agree,
// and the gradients are bitwise those of a backward that reorders again;
// layers that do not qualify get none; a workspace from another geometry's
// layout is not used. The 1x1 GEMM paths (strided, folded) keep the image they
// gathered, likewise.
// Read before: core/native/fast/conv_onednn.h.
#include <doctest/doctest.h>

#include <vector>

#include "core/factory.h"
#include "core/native/fast/conv_onednn.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/parallel.h"
#include "core/rng.h"

namespace ls = lockstep;
namespace native = lockstep::native;
using ls::IntList;
using ls::Tensor;

TEST_CASE("conv workspace: backward-weights reads the forward's blocked input, same gradients") {
  const native::ConvBackend saved = native::conv_backend();
  native::set_conv_backend(native::ConvBackend::OneDNN);
  ls::manual_seed(21);
  struct Case {
    int64_t c, hw, k, stride;
    bool kept;
  };
  // 3x3 at 20x20 (Winograd), 3x3 stride 2 to 16x16 and 3x3 at 7x7 (direct, blocked),
  // 1x1 (plain: nothing to keep), a 3-channel image (plain: nothing to keep), and
  // the 1x1 GEMM paths (Note [1x1 convolutions as GEMMs]): stride 2 to 16x16 (the
  // subsampled image), 7x7 (folded: the channel-major copy), stride 2 to 5x5
  // (both).
  for (const Case& c : {Case{32, 20, 3, 1, true}, Case{32, 32, 3, 2, true},
                        Case{32, 7, 3, 1, true}, Case{32, 20, 1, 1, false},
                        Case{3, 20, 3, 1, false}, Case{32, 32, 1, 2, true},
                        Case{32, 7, 1, 1, true}, Case{32, 10, 1, 2, true}}) {
    CAPTURE(c.hw);
    CAPTURE(c.k);
    CAPTURE(c.stride);
    const int64_t pad = c.k / 2;
    Tensor x = ls::randn({2, c.c, c.hw, c.hw}), w = ls::randn({40, c.c, c.k, c.k});
    auto [y, ws] = native::conv2d_forward_training(x, w, {}, {c.stride}, {pad}, {1}, 1);
    const Tensor y_plain = native::conv2d_forward(x, w, {}, {c.stride}, {pad}, {1}, 1);
    CHECK(native::equal(y, y_plain));
    CHECK((ws != nullptr) == c.kept);
    const Tensor gy = ls::randn(y.sizes());
    auto [gx, gw, gb] = native::conv2d_backward_with({Tensor(), ws}, gy, x, w, {c.stride}, {pad},
                                                     {1}, 1, true, true, false);
    auto [rx, rw, rb] =
        native::conv2d_backward(gy, x, w, {c.stride}, {pad}, {1}, 1, true, true, false);
    CHECK(native::equal(gx, rx));
    CHECK(native::equal(gw, rw));
  }
  native::set_conv_backend(saved);
}

TEST_CASE("conv workspace: one made for another layout is ignored, not misread") {
  const native::ConvBackend saved = native::conv_backend();
  native::set_conv_backend(native::ConvBackend::OneDNN);
  ls::manual_seed(22);
  // A workspace of a 32-channel input handed to a 3-channel convolution's backward,
  // whose backward-weights reads the plain image: it must be left alone.
  Tensor x32 = ls::randn({2, 32, 20, 20}), w32 = ls::randn({16, 32, 3, 3});
  auto [y32, ws] = native::conv2d_forward_training(x32, w32, {}, {1}, {1}, {1}, 1);
  REQUIRE(ws != nullptr);
  Tensor x3 = ls::randn({2, 3, 20, 20}), w3 = ls::randn({16, 3, 3, 3});
  const Tensor gy = ls::randn({2, 16, 20, 20});
  auto [gx, gw, gb] =
      native::conv2d_backward_with({Tensor(), ws}, gy, x3, w3, {1}, {1}, {1}, 1, false, true, false);
  auto [rx, rw, rb] = native::conv2d_backward(gy, x3, w3, {1}, {1}, {1}, 1, false, true, false);
  CHECK(native::equal(gw, rw));
  native::set_conv_backend(saved);
}

TEST_CASE("conv workspace: a 1x1 path's gathered image of another shape is ignored") {
  const native::ConvBackend saved = native::conv_backend();
  native::set_conv_backend(native::ConvBackend::OneDNN);
  ls::manual_seed(23);
  // The strided layer's subsample (2, 32, 16, 16) handed to a folded layer whose
  // channel-major copy has another size and order, and the other way round.
  Tensor xs = ls::randn({2, 32, 32, 32}), ws_w = ls::randn({16, 32, 1, 1});
  auto [ys, strided_ws] = native::conv2d_forward_training(xs, ws_w, {}, {2}, {0}, {1}, 1);
  Tensor xf = ls::randn({2, 32, 7, 7}), wf = ls::randn({16, 32, 1, 1});
  auto [yf, folded_ws] = native::conv2d_forward_training(xf, wf, {}, {1}, {0}, {1}, 1);
  REQUIRE(strided_ws != nullptr);
  REQUIRE(folded_ws != nullptr);
  const Tensor gyf = ls::randn(yf.sizes()), gys = ls::randn(ys.sizes());
  auto [fx, fw, fb] = native::conv2d_backward_with({Tensor(), strided_ws}, gyf, xf, wf, {1}, {0},
                                                   {1}, 1, false, true, false);
  auto [rfx, rfw, rfb] = native::conv2d_backward(gyf, xf, wf, {1}, {0}, {1}, 1, false, true, false);
  CHECK(native::equal(fw, rfw));
  auto [sx, sw, sb] = native::conv2d_backward_with({Tensor(), folded_ws}, gys, xs, ws_w, {2}, {0},
                                                   {1}, 1, false, true, false);
  auto [rsx, rsw, rsb] = native::conv2d_backward(gys, xs, ws_w, {2}, {0}, {1}, 1, false, true, false);
  CHECK(native::equal(sw, rsw));
  native::set_conv_backend(saved);
}
