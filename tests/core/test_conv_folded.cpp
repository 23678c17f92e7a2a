// tests/core/test_conv_folded.cpp — Note [Convolutions as batch-folded GEMMs]:
// backward-weights of small-output convolutions by one GEMM over the batch,
// against the reference backend, for strides, paddings, dilations and
// rectangular kernels, with and without grad_input; the layers the rule leaves
// to oneDNN (few channels, large outputs, a bias) still match; and the
// profiler's label (Note [Convolution profile labels]) shows which path ran.
// Read before: core/native/conv_folded_gemm.h.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/native/conv_onednn.h"
#include "core/native/nn_kernels.h"
#include "core/parallel.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "tests/support/compare.h"

namespace ls = lockstep;
namespace native = lockstep::native;
using ls::IntList;
using ls::Tensor;
using lockstep::testing::relative_error;
using native::ConvBackend;

namespace {

struct Case {
  int64_t c_in, h, w, c_out, kh, kw;
  IntList stride, padding, dilation;
  bool folds;  // what the rule says
};

// The profiler rows whose name contains `part`.
int rows_with(const std::string& part) {
  int n = 0;
  for (const auto& e : ls::profiler::entries()) n += e.name.find(part) != std::string::npos;
  return n;
}

}  // namespace

TEST_CASE("conv folded: backward-weights by one GEMM over the batch matches the reference") {
  const ConvBackend saved = native::conv_backend();
  const int saved_threads = ls::get_num_threads();
  ls::manual_seed(7);
  const std::vector<Case> cases = {
      {16, 14, 13, 24, 3, 3, {2, 2}, {1, 1}, {1, 1}, true},   // ResNet's strided 3x3, odd width
      {16, 7, 9, 20, 3, 3, {1, 1}, {1, 1}, {1, 1}, true},     // stride 1 at 7x9
      {20, 10, 11, 8, 5, 3, {1, 2}, {2, 1}, {2, 1}, true},    // rectangular, dilated, uneven stride
      {3, 9, 9, 8, 3, 3, {1, 1}, {1, 1}, {1, 1}, false},      // few channels: oneDNN
      {16, 16, 16, 8, 3, 3, {1, 1}, {1, 1}, {1, 1}, false},   // 256 output pixels: oneDNN
  };
  for (int threads : {1, 2}) {
    ls::set_num_threads(threads);
    for (const Case& c : cases) {
      CAPTURE(threads);
      CAPTURE(c.c_in);
      CAPTURE(c.h);
      CAPTURE(c.kh);
      Tensor x = ls::randn({3, c.c_in, c.h, c.w}), w = ls::randn({c.c_out, c.c_in, c.kh, c.kw});
      native::set_conv_backend(ConvBackend::Reference);
      const Tensor y = native::conv2d_forward(x, w, {}, c.stride, c.padding, c.dilation, 1);
      const Tensor gy = ls::randn(y.sizes());
      auto [rx, rw, rb] = native::conv2d_backward(gy, x, w, c.stride, c.padding, c.dilation, 1,
                                                  true, true, true);
      native::set_conv_backend(ConvBackend::OneDNN);
      ls::profiler::reset();
      ls::profiler::enable();
      auto [ox, ow, no_b] = native::conv2d_backward(gy, x, w, c.stride, c.padding, c.dilation, 1,
                                                    true, true, false);
      auto [no_x, only_w, no_b2] = native::conv2d_backward(gy, x, w, c.stride, c.padding,
                                                           c.dilation, 1, false, true, false);
      ls::profiler::disable();
      const int folded_rows = rows_with("gemm-folded");
      auto [bx, bw, bb] =  // a bias gradient keeps the primitive
          native::conv2d_backward(gy, x, w, c.stride, c.padding, c.dilation, 1, true, true, true);
      CHECK(relative_error(ox, rx) < 1e-5);
      CHECK(relative_error(ow, rw) < 1e-5);
      CHECK(relative_error(only_w, rw) < 1e-5);
      CHECK(relative_error(bw, rw) < 1e-5);
      CHECK(relative_error(bb, rb) < 1e-5);
      CHECK_FALSE(no_x.defined());
      CHECK_FALSE(no_b.defined());
      CHECK(folded_rows == (c.folds ? 1 : 0));
    }
  }
  ls::profiler::reset();
  ls::set_num_threads(saved_threads);
  native::set_conv_backend(saved);
}

TEST_CASE("conv folded: profile labels name the pass, kernel, stride, channels and output size") {
  ls::manual_seed(8);
  const ConvBackend saved = native::conv_backend();
  native::set_conv_backend(ConvBackend::OneDNN);
  Tensor x = ls::randn({2, 16, 14, 14}), w = ls::randn({24, 16, 3, 3});
  ls::profiler::reset();
  ls::profiler::enable();
  const Tensor y = native::conv2d_forward(x, w, {}, {2, 2}, {1, 1}, {1, 1}, 1);
  native::conv2d_backward(ls::ones(y.sizes()), x, w, {2, 2}, {1, 1}, {1, 1}, 1, true, true, false);
  ls::profiler::disable();
  CHECK(rows_with("conv fwd 3x3s2 16->24 @7x7 b2 ") == 1);
  CHECK(rows_with("conv bwd-d 3x3s2 16->24 @7x7 b2 ") == 1);
  CHECK(rows_with("conv bwd-w 3x3s2 16->24 @7x7 b2 gemm-folded") == 1);
  ls::profiler::reset();
  native::set_conv_backend(saved);
}
