// tests/core/test_conv_winograd.cpp — oneDNN's Winograd convolutions (Note
// [Winograd convolutions] in core/native/fast/conv_winograd.cpp) against the float64
// reference, and the switch that turns them off.
//
// Winograd F(4x4, 3x3) computes each 6x6 input tile's outputs through input,
// weight and output transforms whose coefficients reach 2^3 / 2^-3, so float32
// rounding grows: on the ResNet-like shapes below (randn and post-ReLU inputs)
// the largest error relative to the largest magnitude of the result measured
// 0.7e-6 .. 5.1e-6, against 0.2e-6 .. 1.4e-6 for the direct algorithm (the
// first test prints both per shape and pass). kTol (5e-5) is ten times the worst
// Winograd error measured and far below the O(1) error of a wrong tile,
// transform or index. Each geometry runs forward, backward-data
// and backward-weights with ConvWinograd::Force, checks that oneDNN really ran
// Winograd where it implements it (a 3x3 stride-1 layer with 16k channels),
// and compares with the same convolution in float64 on the reference backend.
//
// Read before: core/native/fast/conv_onednn.h, tests/core/test_conv_onednn.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
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
using native::ConvPass;
using native::ConvWinograd;

namespace {

constexpr double kTol = 5e-5;

// Restores the process-wide backend, Winograd mode and thread count.
struct ModeGuard {
  native::ConvBackend backend = native::conv_backend();
  ConvWinograd winograd = native::conv_winograd();
  int threads = ls::get_num_threads();
  ~ModeGuard() {
    native::set_conv_backend(backend);
    native::set_conv_winograd(winograd);
    ls::set_num_threads(threads);
  }
};

// max |got - want| / max(1e-30, max |want|): the error relative to the largest magnitude.
double rel_error(const Tensor& got, const Tensor& want) {
  REQUIRE(got.defined());
  REQUIRE(want.defined());
  REQUIRE(got.sizes() == want.sizes());
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  double scale = 1e-30, worst = 0;
  for (double v : b) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst / scale;
}

struct Shape {
  int64_t n, c_in, h, w, c_out;
};

// The three results (y, grad_input, grad_weight) of one 3x3 stride-1 padding-1 convolution.
struct Results {
  Tensor y, gx, gw;
};

Results run3x3(const Tensor& x, const Tensor& w, const Tensor& gy) {
  const IntList stride{1}, pad{1}, dil{1};
  Results r;
  r.y = native::conv2d_forward(x, w, Tensor(), stride, pad, dil, 1);
  auto [gx, gw, gb] = native::conv2d_backward(gy, x, w, stride, pad, dil, 1, true, true, false);
  r.gx = gx;
  r.gw = gw;
  return r;
}

native::ConvGeometry geometry(const Tensor& x, const Tensor& w) {
  return native::make_conv_geometry(x, w, Tensor(), {1}, {1}, {1}, 1, "test");
}

bool runs_winograd(const native::ConvGeometry& g, ConvPass pass) {
  // oneDNN's Winograd kernels are "jit_wino_4x3:avx512_core" and the like.
  return native::conv_onednn_impl(g, pass, false).find("wino") != std::string::npos;
}

}  // namespace

TEST_CASE("winograd convolutions match the float64 reference on ResNet-like shapes") {
  ModeGuard guard;
  ls::set_num_threads(1);
  ls::manual_seed(7);
  // ResNet50's 3x3 stride-1 channel counts at reduced batch and image size,
  // and an odd image size (partial 4x4 output tiles).
  const std::vector<Shape> shapes = {
      {2, 64, 28, 28, 64}, {2, 128, 14, 14, 128}, {2, 256, 7, 7, 256},
      {1, 512, 7, 7, 512}, {3, 32, 13, 11, 48},
  };
  for (const Shape& s : shapes) {
   for (bool post_relu : {false, true}) {
    CAPTURE(s.n);
    CAPTURE(s.c_in);
    CAPTURE(s.h);
    CAPTURE(s.c_out);
    CAPTURE(post_relu);
    // (N, C_in, H, W); post_relu: non-negative, like the activations ResNet convolves
    Tensor x = ls::randn({s.n, s.c_in, s.h, s.w});
    if (post_relu) x = native::unary(native::UnaryOp::Relu, x);
    const Tensor w = ls::randn({s.c_out, s.c_in, 3, 3});   // (C_out, C_in, 3, 3)
    const Tensor gy = ls::randn({s.n, s.c_out, s.h, s.w});  // (N, C_out, H, W)
    native::set_conv_backend(native::ConvBackend::Reference);
    const Results want = run3x3(native::to_dtype(x, ls::kFloat64),
                                native::to_dtype(w, ls::kFloat64),
                                native::to_dtype(gy, ls::kFloat64));
    native::set_conv_backend(native::ConvBackend::OneDNN);
    native::set_conv_winograd(ConvWinograd::Off);
    const Results direct = run3x3(x, w, gy);
    native::set_conv_winograd(ConvWinograd::Force);
    const native::ConvGeometry g = geometry(x, w);
    // Without Winograd kernels on this CPU (conv_winograd_available) Force runs direct.
    const bool available = native::conv_winograd_available();
    CHECK(runs_winograd(g, ConvPass::Forward) == available);
    CHECK(runs_winograd(g, ConvPass::BackwardData) == available);
    CHECK(runs_winograd(g, ConvPass::BackwardWeights) == available);
    const Results wino = run3x3(x, w, gy);
    const double e[3] = {rel_error(wino.y, want.y), rel_error(wino.gx, want.gx),
                         rel_error(wino.gw, want.gw)};
    const double d[3] = {rel_error(direct.y, want.y), rel_error(direct.gx, want.gx),
                         rel_error(direct.gw, want.gw)};
    MESSAGE(ls::detail::str(post_relu ? "post-relu input " : "randn input ", "max relative error, winograd / direct: fwd ", e[0], " / ", d[0],
                            ", bwd-data ", e[1], " / ", d[1], ", bwd-weights ", e[2], " / ",
                            d[2]));
    CHECK(e[0] <= kTol);
    CHECK(e[1] <= kTol);
    CHECK(e[2] <= kTol);
    CHECK(d[0] <= kTol);  // the direct path stays far tighter (test_conv_onednn.cpp: 2e-5)
   }
  }
}

TEST_CASE("winograd is only used for eligible convolutions and stays correct elsewhere") {
  ModeGuard guard;
  native::set_conv_backend(native::ConvBackend::OneDNN);
  native::set_conv_winograd(ConvWinograd::Force);
  ls::manual_seed(3);
  // Stride 2, a 5x5 kernel and dilation 2 must run direct, with correct results.
  struct Case {
    IntList stride, pad, dil;
    int64_t k;
  };
  for (const Case& c : {Case{{2}, {1}, {1}, 3}, Case{{1}, {2}, {1}, 5}, Case{{1}, {2}, {2}, 3}}) {
    const Tensor x = ls::randn({2, 32, 12, 12});        // (N, C_in, H, W)
    const Tensor w = ls::randn({32, 32, c.k, c.k});     // (C_out, C_in, k, k)
    const native::ConvGeometry g =
        native::make_conv_geometry(x, w, Tensor(), c.stride, c.pad, c.dil, 1, "test");
    CHECK(native::conv_onednn_impl(g, ConvPass::Forward, false).find("wino") ==
          std::string::npos);
    const Tensor y = native::conv2d_forward(x, w, Tensor(), c.stride, c.pad, c.dil, 1);
    native::set_conv_backend(native::ConvBackend::Reference);
    const Tensor want = native::conv2d_forward(native::to_dtype(x, ls::kFloat64),
                                               native::to_dtype(w, ls::kFloat64), Tensor(),
                                               c.stride, c.pad, c.dil, 1);
    native::set_conv_backend(native::ConvBackend::OneDNN);
    CHECK(rel_error(y, want) <= 2e-5);
  }
}

TEST_CASE("LOCKSTEP_CONV_WINOGRAD=0 gives the direct path") {
  ModeGuard guard;
  const char* saved = std::getenv("LOCKSTEP_CONV_WINOGRAD");
  const std::string saved_value = saved ? saved : "";
  ::setenv("LOCKSTEP_CONV_WINOGRAD", "0", 1);
  CHECK(native::conv_winograd_from_env() == ConvWinograd::Off);
  ::setenv("LOCKSTEP_CONV_WINOGRAD", "auto", 1);
  CHECK(native::conv_winograd_from_env() == ConvWinograd::Auto);
  ::setenv("LOCKSTEP_CONV_WINOGRAD", "timed", 1);
  CHECK(native::conv_winograd_from_env() == ConvWinograd::Timed);
  ::setenv("LOCKSTEP_CONV_WINOGRAD", "force", 1);
  CHECK(native::conv_winograd_from_env() == ConvWinograd::Force);
  ::setenv("LOCKSTEP_CONV_WINOGRAD", "maybe", 1);
  CHECK_THROWS_AS(native::conv_winograd_from_env(), ls::Error);
  ::setenv("LOCKSTEP_CONV_WINOGRAD", "0", 1);
  native::set_conv_winograd(native::conv_winograd_from_env());
  if (saved) {
    ::setenv("LOCKSTEP_CONV_WINOGRAD", saved_value.c_str(), 1);
  } else {
    ::unsetenv("LOCKSTEP_CONV_WINOGRAD");
  }

  native::set_conv_backend(native::ConvBackend::OneDNN);
  ls::manual_seed(5);
  const Tensor x = ls::randn({2, 64, 14, 14});   // (N, C_in, H, W)
  const Tensor w = ls::randn({64, 64, 3, 3});    // (C_out, C_in, 3, 3)
  const Tensor gy = ls::randn({2, 64, 14, 14});  // (N, C_out, H, W)
  const native::ConvGeometry g = geometry(x, w);
  for (ConvPass pass : {ConvPass::Forward, ConvPass::BackwardData, ConvPass::BackwardWeights}) {
    CHECK_FALSE(runs_winograd(g, pass));
  }
  const Results off = run3x3(x, w, gy);
  native::set_conv_winograd(ConvWinograd::Force);
  const bool wino = native::conv_winograd_available();  // else Force runs direct
  for (ConvPass pass : {ConvPass::Forward, ConvPass::BackwardData, ConvPass::BackwardWeights}) {
    CHECK(runs_winograd(g, pass) == wino);
  }
  const Results on = run3x3(x, w, gy);
  // Different algorithms: close, but not bit-identical (which shows the switch matters).
  CHECK(rel_error(on.y, off.y) <= kTol);
  CHECK((on.y.to_vector<float>() != off.y.to_vector<float>()) == wino);
}

TEST_CASE("winograd auto mode follows the image-size rule") {
  ModeGuard guard;
  ls::set_num_threads(1);
  native::set_conv_backend(native::ConvBackend::OneDNN);
  native::set_conv_winograd(ConvWinograd::Auto);
  // 14x14 and larger outputs run Winograd, 7x7 ones direct (Note [Winograd convolutions]).
  const Tensor w64 = ls::randn({64, 64, 3, 3});    // (C_out, C_in, 3, 3)
  const Tensor w512 = ls::randn({512, 512, 3, 3});  // (C_out, C_in, 3, 3)
  const auto big = geometry(ls::randn({8, 64, 14, 14}), w64);
  const auto small = geometry(ls::randn({8, 512, 7, 7}), w512);
  for (ConvPass pass : {ConvPass::Forward, ConvPass::BackwardData, ConvPass::BackwardWeights}) {
    CHECK(runs_winograd(big, pass) == native::conv_winograd_available());
    CHECK_FALSE(runs_winograd(small, pass));
  }
}

TEST_CASE("winograd timed mode keeps a correct algorithm per pass") {
  ModeGuard guard;
  ls::set_num_threads(1);
  native::set_conv_backend(native::ConvBackend::OneDNN);
  native::set_conv_winograd(ConvWinograd::Timed);
  ls::manual_seed(11);
  const Tensor x = ls::randn({2, 64, 14, 14});   // (N, C_in, H, W)
  const Tensor w = ls::randn({64, 64, 3, 3});    // (C_out, C_in, 3, 3)
  const Tensor gy = ls::randn({2, 64, 14, 14});  // (N, C_out, H, W)
  const Results got = run3x3(x, w, gy);
  native::set_conv_backend(native::ConvBackend::Reference);
  const Results want = run3x3(native::to_dtype(x, ls::kFloat64), native::to_dtype(w, ls::kFloat64),
                              native::to_dtype(gy, ls::kFloat64));
  CHECK(rel_error(got.y, want.y) <= kTol);
  CHECK(rel_error(got.gx, want.gx) <= kTol);
  CHECK(rel_error(got.gw, want.gw) <= kTol);
  native::set_conv_backend(native::ConvBackend::OneDNN);
  const std::string impl = native::conv_onednn_impl(geometry(x, w), ConvPass::Forward, false);
  CHECK(impl.rfind("jit", 0) == 0);  // a real oneDNN kernel, Winograd or direct
}
