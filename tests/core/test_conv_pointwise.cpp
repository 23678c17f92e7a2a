// tests/core/test_conv_pointwise.cpp — 1x1 convolutions as GEMMs (Note [1x1
// convolutions as GEMMs]) against the reference backend: on 41x30 images one GEMM
// per image, at stride 1 (backward-data by GEMM) and strides 2 and 3x2 (every pass
// over the subsampled image, sizes where the last row/column is or is not sampled);
// on 9x8 images, below kFoldPixels, every pass by one GEMM over the whole batch at
// all three strides; with and without the other gradients, and with a bias (which
// keeps the oneDNN primitives).
// Read before: core/native/fast/conv_1x1_gemm.h.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/factory.h"
#include "core/native/fast/conv_onednn.h"
#include "core/native/nn_kernels.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/shape.h"
#include "tests/support/compare.h"

namespace ls = lockstep;
namespace native = lockstep::native;
using ls::Tensor;
using lockstep::testing::relative_error;
using native::ConvBackend;

TEST_CASE("conv pointwise: 1x1 passes by GEMM match the reference backend") {
  const ConvBackend saved = native::conv_backend();
  const int saved_threads = ls::get_num_threads();
  ls::manual_seed(31);
  for (int threads : {1, 2}) {
    ls::set_num_threads(threads);
    for (ls::IntList hw : {ls::IntList{9, 8}, ls::IntList{41, 30}}) {
      for (ls::IntList stride : {ls::IntList{1, 1}, ls::IntList{2, 2}, ls::IntList{3, 2}}) {
        CAPTURE(threads);
        CAPTURE(hw[0]);
        CAPTURE(stride[0]);
        CAPTURE(stride[1]);
        Tensor x = ls::randn({2, 16, hw[0], hw[1]}), w = ls::randn({40, 16, 1, 1});
        Tensor b = ls::randn({40});
        Tensor gy = ls::randn({2, 40, (hw[0] - 1) / stride[0] + 1, (hw[1] - 1) / stride[1] + 1});
        native::set_conv_backend(ConvBackend::Reference);
        Tensor ry = native::conv2d_forward(x, w, {}, stride, {0, 0}, {1, 1}, 1);
        Tensor ryb = native::conv2d_forward(x, w, b, stride, {0, 0}, {1, 1}, 1);
        auto [rx, rw, rb] =
            native::conv2d_backward(gy, x, w, stride, {0, 0}, {1, 1}, 1, true, true, true);
        native::set_conv_backend(ConvBackend::OneDNN);
        Tensor oy = native::conv2d_forward(x, w, {}, stride, {0, 0}, {1, 1}, 1);
        Tensor oyb = native::conv2d_forward(x, w, b, stride, {0, 0}, {1, 1}, 1);
        auto [ox, ow, no_b] =
            native::conv2d_backward(gy, x, w, stride, {0, 0}, {1, 1}, 1, true, true, false);
        auto [only_x, no_w, no_b2] =
            native::conv2d_backward(gy, x, w, stride, {0, 0}, {1, 1}, 1, true, false, false);
        auto [no_x, bw, bb] =  // with the bias gradient: the primitive path
            native::conv2d_backward(gy, x, w, stride, {0, 0}, {1, 1}, 1, false, true, true);
        CHECK(relative_error(oy, ry) < 1e-5);
        CHECK(relative_error(oyb, ryb) < 1e-5);
        CHECK(relative_error(ox, rx) < 1e-5);
        CHECK(relative_error(ow, rw) < 1e-5);
        CHECK(relative_error(only_x, rx) < 1e-5);
        CHECK(relative_error(bw, rw) < 1e-5);
        CHECK(relative_error(bb, rb) < 1e-5);
        CHECK_FALSE(no_w.defined());
        CHECK_FALSE(no_x.defined());
        CHECK_FALSE(no_b.defined());
        CHECK_FALSE(no_b2.defined());
      }
    }
  }
  native::set_conv_backend(saved);
  ls::set_num_threads(saved_threads);
}
