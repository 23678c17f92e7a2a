// tests/core/test_dispatch_verbose.cpp — LOCKSTEP_VERBOSE=dispatch (Note [Kernel
// dispatch]): the value is parsed as documented, and with it on, each convolution
// pass, GEMM, max-pool and batch norm prints one stderr line naming the implementation that
// ran; with it off, none.
// Read before: core/native/dispatch_verbose.h, core/native/conv_dispatch.h.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/factory.h"
#include "core/native/conv_dispatch.h"
#include "core/native/dispatch_verbose.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "tests/support/stderr_capture.h"

namespace ls = lockstep;
namespace native = lockstep::native;
using ls::Tensor;
using lockstep::testing::stderr_of;

namespace {

bool has_line(const std::string& log, const std::string& start) {
  return log.find("lockstep_verbose,dispatch," + start) != std::string::npos;
}

// A convolution forward and its whole backward on a (2, c_in, hw, hw) image.
void conv_step(ls::ScalarType dtype, int64_t c_in, int64_t c_out, int64_t kernel, int64_t hw,
               int64_t stride) {
  const Tensor x = ls::randn({2, c_in, hw, hw}).to(dtype);
  const Tensor w = ls::randn({c_out, c_in, kernel, kernel}).to(dtype);
  const Tensor y = native::conv2d_forward(x, w, Tensor(), {stride}, {0}, {1}, 1);
  native::conv2d_backward(ls::ones_like(y), x, w, {stride}, {0}, {1}, 1, true, true, false);
}

struct VerboseAndBackend {
  native::ConvBackend backend = native::conv_backend();
  bool verbose = native::dispatch_verbose();
  ~VerboseAndBackend() {
    native::set_conv_backend(backend);
    native::set_dispatch_verbose(verbose);
  }
};

}  // namespace

TEST_CASE("dispatch verbose: LOCKSTEP_VERBOSE is parsed as documented") {
  const char* before = std::getenv("LOCKSTEP_VERBOSE");
  const std::string saved = before != nullptr ? before : "";
  for (const char* on : {"dispatch", "all", "0,dispatch", "dispatch,"}) {
    setenv("LOCKSTEP_VERBOSE", on, 1);
    CHECK_MESSAGE(native::dispatch_verbose_from_env(), on);
  }
  for (const char* off : {"", "0", "none"}) {
    setenv("LOCKSTEP_VERBOSE", off, 1);
    CHECK_MESSAGE(!native::dispatch_verbose_from_env(), off);
  }
  setenv("LOCKSTEP_VERBOSE", "dispatc", 1);
  CHECK_THROWS_WITH_AS(native::dispatch_verbose_from_env(),
                       doctest::Contains("unknown value 'dispatc'"), ls::Error);
  unsetenv("LOCKSTEP_VERBOSE");
  CHECK(!native::dispatch_verbose_from_env());
  if (before != nullptr) setenv("LOCKSTEP_VERBOSE", saved.c_str(), 1);
}

TEST_CASE("dispatch verbose: each convolution pass and GEMM names its implementation") {
  VerboseAndBackend restore;
  native::set_dispatch_verbose(true);
  native::set_conv_backend(native::ConvBackend::OneDNN);
  const std::string log = stderr_of([] {
    conv_step(ls::kFloat32, 16, 16, 3, 8, 1);  // 3x3 over 16 channels: oneDNN's blocked kernels
    conv_step(ls::kFloat32, 8, 4, 1, 6, 2);    // strided 1x1 with a 3x3 output: folded GEMMs
    conv_step(ls::kFloat64, 3, 4, 3, 6, 1);    // float64: im2col + GEMM (Eigen)
    native::mm(ls::randn({2, 4}), ls::randn({4, 3}));
    native::max_pool2d_forward(ls::randn({1, 2, 8, 8}), {2}, {2}, {0});
    native::max_pool2d_forward(ls::randn({1, 1, 6, 6}).to(ls::kFloat64), {3}, {1}, {1});
    native::batch_norm_forward(ls::randn({2, 3, 4, 4}), Tensor(), Tensor(), Tensor(), Tensor(),
                               true, 0.1, 1e-5);
    native::batch_norm_forward(native::channels_last(ls::randn({2, 3, 4, 4}).to(ls::kBFloat16)),
                               Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
  });
  INFO(log);
  CHECK(has_line(log, "conv2d.forward,onednn,float32,x (2, 16, 8, 8) w (16, 16, 3, 3) stride 1x1"));
  CHECK(has_line(log, "conv2d.backward_data,onednn,float32,x (2, 16, 8, 8)"));
  CHECK(has_line(log, "conv2d.backward_weights,onednn,float32,x (2, 16, 8, 8)"));
  CHECK(has_line(log, "conv2d.forward,gemm_1x1_folded,float32,x (2, 8, 6, 6) w (4, 8, 1, 1) stride 2x2"));
  CHECK(has_line(log, "conv2d.backward_data,gemm_1x1_folded,float32,x (2, 8, 6, 6)"));
  CHECK(has_line(log, "conv2d.backward_weights,gemm_1x1_folded,float32,x (2, 8, 6, 6)"));
  CHECK(has_line(log, "conv2d.forward,im2col_gemm,float64,x (2, 3, 6, 6) w (4, 3, 3, 3)"));
  CHECK(has_line(log, "gemm,eigen,float64,m 4 n 16 k 27"));  // one image's im2col product
  CHECK(has_line(log, "gemm,onednn,float32,m 2 n 3 k 4\n"));
  // The 2x2 kernel is AVX-512 code; without it the side-by-side kernel takes these windows.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  CHECK(has_line(log, "max_pool2d.forward,2x2,float32,x (1, 2, 8, 8) kernel 2x2 stride 2x2"));
#else
  CHECK(has_line(log, "max_pool2d.forward,side_by_side,float32,x (1, 2, 8, 8) kernel 2x2 stride 2x2"));
#endif
  CHECK(has_line(log, "max_pool2d.forward,windows,float64,x (1, 1, 6, 6) kernel 3x3 stride 1x1 padding 1x1"));
  CHECK(has_line(log, "batch_norm,planes,float32,input [2, 3, 4, 4]"));
  CHECK(has_line(log, "batch_norm,bf16_channels_last,bfloat16,input [2, 3, 4, 4]"));

  native::set_conv_backend(native::ConvBackend::Reference);
  const std::string reference = stderr_of([] { conv_step(ls::kFloat32, 16, 16, 3, 8, 1); });
  CHECK(has_line(reference, "conv2d.forward,im2col_gemm,float32,x (2, 16, 8, 8)"));
  CHECK(has_line(reference, "conv2d.backward_weights,im2col_gemm,float32,x (2, 16, 8, 8)"));
  CHECK(!has_line(reference, "conv2d.forward,onednn"));

  native::set_dispatch_verbose(false);
  const std::string quiet = stderr_of([] { conv_step(ls::kFloat32, 16, 16, 3, 8, 1); });
  CHECK(quiet.find("lockstep_verbose") == std::string::npos);
}
