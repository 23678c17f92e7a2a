// tests/core/test_conv_onednn.cpp — the oneDNN convolution backend against the
// reference (im2col + GEMM) backend, and the backend switch and primitive cache.
//
// Every geometry runs forward (with and without bias), backward-data and
// backward-weights (+ bias) on both backends in float32 and compares the
// results: the largest difference must be below kTol times the largest
// magnitude of the reference result (float32 sums of up to a few thousand
// products differ by rounding only, ~1e-6 relative; an indexing error is O(1)).
// The geometries cover each layout plan of Note [oneDNN convolution layouts]
// (blocked 3x3, 1x1 plain, few-channel images) and stride 2, padding,
// dilation, groups (incl. depthwise and groups oneDNN declines), batch 1,
// non-square images and kernels, odd channel counts, plus random geometries.
// test_conv.cpp checks both backends against a direct convolution in doubles.
//
// Read before: core/native/fast/conv_onednn.h, tests/core/test_conv.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/factory.h"
#include "core/native/fast/conv_onednn.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/shape.h"

namespace ls = lockstep;
namespace native = lockstep::native;
using ls::IntList;
using ls::Tensor;
using native::ConvBackend;

namespace {

constexpr double kTol = 2e-5;

struct Geometry {
  int64_t n, c_in, h, w, c_out, kh, kw;
  IntList stride, padding, dilation;
  int64_t groups;
};

std::string describe(const Geometry& g) {
  return ls::detail::str("n=", g.n, " c_in=", g.c_in, " h=", g.h, " w=", g.w, " c_out=", g.c_out,
                         " k=", g.kh, "x", g.kw, " stride=", ls::shape_str(g.stride),
                         " padding=", ls::shape_str(g.padding),
                         " dilation=", ls::shape_str(g.dilation), " groups=", g.groups);
}

// Restores the process-wide backend when a test ends, even on failure.
struct BackendGuard {
  ConvBackend saved = native::conv_backend();
  int threads = ls::get_num_threads();
  ~BackendGuard() {
    native::set_conv_backend(saved);
    ls::set_num_threads(threads);
  }
};

// max |got - want| <= kTol * max(1, max |want|), element by element over the tensors.
void check_matches(const Tensor& got, const Tensor& want, const char* what) {
  CAPTURE(what);
  REQUIRE(got.defined());
  REQUIRE(want.defined());
  REQUIRE(got.sizes() == want.sizes());
  CHECK(got.dtype() == ls::kFloat32);
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  double scale = 1, worst = 0;
  for (double v : b) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  CHECK(worst <= kTol * scale);
}

struct Results {
  Tensor y, y_no_bias, gx, gw, gb;
};

Results run(ConvBackend backend, const Geometry& c, const Tensor& x, const Tensor& w,
            const Tensor& b, const Tensor& gy) {
  native::set_conv_backend(backend);
  Results r;
  r.y = native::conv2d_forward(x, w, b, c.stride, c.padding, c.dilation, c.groups);
  r.y_no_bias = native::conv2d_forward(x, w, {}, c.stride, c.padding, c.dilation, c.groups);
  std::tie(r.gx, r.gw, r.gb) = native::conv2d_backward(gy, x, w, c.stride, c.padding, c.dilation,
                                                       c.groups, true, true, true);
  return r;
}

void compare_backends(const Geometry& c) {
  CAPTURE(describe(c));
  Tensor x = ls::randn({c.n, c.c_in, c.h, c.w});             // (N, C_in, H, W)
  Tensor w = ls::randn({c.c_out, c.c_in / c.groups, c.kh, c.kw});  // (C_out, C_in_g, kH, kW)
  Tensor b = ls::randn({c.c_out});                            // (C_out)
  native::set_conv_backend(ConvBackend::Reference);
  const IntList out_sizes =
      native::conv2d_forward(x, w, b, c.stride, c.padding, c.dilation, c.groups).sizes();
  Tensor gy = ls::randn(out_sizes);  // (N, C_out, oH, oW)
  const Results ref = run(ConvBackend::Reference, c, x, w, b, gy);
  const Results dnn = run(ConvBackend::OneDNN, c, x, w, b, gy);
  // oneDNN must have run each pass, except backward-data of a few-channel image,
  // which Note [oneDNN convolution layouts] leaves to the reference.
  const auto geometry = native::make_conv_geometry(x, w, b, c.stride, c.padding, c.dilation,
                                                   c.groups, "test");
  for (auto pass : {native::ConvPass::Forward, native::ConvPass::BackwardData,
                    native::ConvPass::BackwardWeights}) {
    const std::string impl = native::conv_onednn_impl(geometry, pass, true);
    CAPTURE(static_cast<int>(pass));
    CAPTURE(impl);
    const bool declines = pass == native::ConvPass::BackwardData && c.c_in < 16;
    CHECK((impl == "none") == declines);
  }
  check_matches(dnn.y, ref.y, "forward");
  check_matches(dnn.y_no_bias, ref.y_no_bias, "forward without bias");
  check_matches(dnn.gx, ref.gx, "grad_input");
  check_matches(dnn.gw, ref.gw, "grad_weight");
  check_matches(dnn.gb, ref.gb, "grad_bias");
}

const std::vector<Geometry>& fixed_geometries() {
  static const std::vector<Geometry> all = {
      {2, 16, 9, 9, 32, 3, 3, {1}, {1}, {1}, 1},             // blocked 3x3, "same" padding
      {2, 32, 10, 12, 16, 3, 3, {2}, {1}, {1}, 1},           // stride 2, non-square image
      {1, 16, 8, 8, 16, 3, 3, {1}, {2}, {2}, 1},             // batch 1, dilation 2
      {2, 16, 9, 7, 24, 3, 5, {1, 2}, {1, 2}, {2, 1}, 1},    // per-dim everything, 3x5 kernel
      {2, 32, 7, 7, 32, 3, 3, {1}, {1}, {1}, 32},            // depthwise
      {2, 32, 8, 8, 64, 3, 3, {2}, {1}, {1}, 2},             // groups 2, stride 2
      {2, 8, 6, 6, 12, 3, 3, {1}, {1}, {1}, 4},              // groups 4 of 2 channels
      {2, 64, 6, 6, 32, 1, 1, {1}, {0}, {1}, 1},             // 1x1: plain GEMM plan
      {2, 32, 6, 5, 48, 1, 1, {1}, {0}, {1}, 4},             // 1x1 grouped
      {2, 32, 9, 9, 16, 1, 1, {2}, {0}, {1}, 1},             // 1x1 stride 2 (blocked)
      {1, 17, 5, 6, 19, 2, 2, {1}, {0}, {1}, 1},             // odd channel counts, even kernel
      {2, 3, 20, 20, 16, 7, 7, {2}, {3}, {1}, 1},            // ResNet-stem-like, 3 channels
      {4, 1, 12, 12, 8, 3, 3, {1}, {1}, {1}, 1},             // Fashion-MNIST conv1-like
      {3, 20, 5, 5, 20, 5, 5, {1}, {2}, {1}, 1},             // kernel as large as the image
  };
  return all;
}

}  // namespace

TEST_CASE("conv onednn: every pass matches the reference backend on fixed geometries") {
  BackendGuard guard;
  ls::manual_seed(11);
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    ls::set_num_threads(threads);
    for (const Geometry& g : fixed_geometries()) compare_backends(g);
  }
}

TEST_CASE("conv onednn: every pass matches the reference backend on random geometries") {
  BackendGuard guard;
  ls::set_num_threads(1);
  ls::manual_seed(12);
  std::mt19937 rng(12);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int i = 0; i < 12; ++i) {
    Geometry g{};
    g.groups = std::vector<int64_t>{1, 1, 2, 4}[pick(0, 3)];
    g.n = pick(1, 3);
    g.c_in = g.groups * pick(1, 20);
    g.c_out = g.groups * pick(1, 12);
    g.kh = pick(1, 4);
    g.kw = pick(1, 4);
    const int64_t sh = pick(1, 3), sw = pick(1, 3), dh = pick(1, 2), dw = pick(1, 2);
    const int64_t ph = pick(0, g.kh / 2 + 1), pw = pick(0, g.kw / 2 + 1);
    // Big enough for the dilated kernel: H + 2 pad >= dil (k - 1) + 1.
    g.h = std::max<int64_t>(pick(3, 12), dh * (g.kh - 1) + 1);
    g.w = std::max<int64_t>(pick(3, 12), dw * (g.kw - 1) + 1);
    g.stride = {sh, sw};
    g.padding = {ph, pw};
    g.dilation = {dh, dw};
    CAPTURE(i);
    compare_backends(g);
  }
}

TEST_CASE("conv onednn: only the requested gradients are computed, each matching") {
  BackendGuard guard;
  ls::manual_seed(13);
  const Geometry c{2, 16, 8, 8, 32, 3, 3, {1}, {1}, {1}, 1};
  Tensor x = ls::randn({2, 16, 8, 8}), w = ls::randn({32, 16, 3, 3});
  Tensor gy = ls::randn({2, 32, 8, 8});
  native::set_conv_backend(ConvBackend::Reference);
  auto [rx, rw, rb] = native::conv2d_backward(gy, x, w, c.stride, c.padding, c.dilation, 1, true,
                                              true, true);
  native::set_conv_backend(ConvBackend::OneDNN);
  for (int mask = 1; mask < 8; ++mask) {
    const bool need_input = mask & 1, need_weight = mask & 2, need_bias = mask & 4;
    CAPTURE(mask);
    auto [gx, gw, gb] = native::conv2d_backward(gy, x, w, c.stride, c.padding, c.dilation, 1,
                                                need_input, need_weight, need_bias);
    CHECK(gx.defined() == need_input);
    CHECK(gw.defined() == need_weight);
    CHECK(gb.defined() == need_bias);
    if (need_input) check_matches(gx, rx, "grad_input");
    if (need_weight) check_matches(gw, rw, "grad_weight");
    if (need_bias) check_matches(gb, rb, "grad_bias");
  }
}

TEST_CASE("conv onednn: the backend switch routes float32 and leaves float64 on the reference") {
  BackendGuard guard;
  ls::set_num_threads(1);
  ls::manual_seed(14);
  native::set_conv_backend(ConvBackend::Reference);
  CHECK(native::conv_backend() == ConvBackend::Reference);
  CHECK(std::string(native::conv_backend_name(ConvBackend::Reference)) == "reference");
  CHECK(std::string(native::conv_backend_name(ConvBackend::OneDNN)) == "onednn");
  // A geometry no other test uses, so its primitives are built here.
  Tensor x = ls::randn({3, 24, 11, 10}), w = ls::randn({40, 24, 3, 3}), b = ls::randn({40});
  const auto before = native::conv_onednn_cache_stats();
  Tensor y_ref = native::conv2d_forward(x, w, b, {1}, {1}, {1}, 1);
  CHECK(native::conv_onednn_cache_stats().built == before.built);  // reference: no primitive

  native::set_conv_backend(ConvBackend::OneDNN);
  CHECK(native::conv_backend() == ConvBackend::OneDNN);
  Tensor y = native::conv2d_forward(x, w, b, {1}, {1}, {1}, 1);
  const auto after_first = native::conv_onednn_cache_stats();
  CHECK(after_first.built == before.built + 1);  // the forward primitive, built once
  CHECK(after_first.entries >= 1);
  check_matches(y, y_ref, "forward");

  // Steady state: the same geometry again builds nothing.
  Tensor gy = ls::randn(y.sizes());
  for (int step = 0; step < 3; ++step) {
    native::conv2d_forward(x, w, b, {1}, {1}, {1}, 1);
    native::conv2d_backward(gy, x, w, {1}, {1}, {1}, 1, true, true, true);
  }
  CHECK(native::conv_onednn_cache_stats().built == after_first.built + 2);  // + the 2 backward

  // float64 never reaches oneDNN.
  const auto before64 = native::conv_onednn_cache_stats();
  Tensor x64 = native::to_dtype(x, ls::kFloat64), w64 = native::to_dtype(w, ls::kFloat64);
  Tensor y64 = native::conv2d_forward(x64, w64, native::to_dtype(b, ls::kFloat64), {2}, {0}, {1},
                                      1);
  CHECK(y64.dtype() == ls::kFloat64);
  CHECK(native::conv_onednn_cache_stats().built == before64.built);
}

TEST_CASE("conv onednn: the layout plans use a oneDNN kernel, not the fallback") {
  BackendGuard guard;
  ls::set_num_threads(1);
  Tensor x = ls::randn({2, 32, 8, 8}), w3 = ls::randn({16, 32, 3, 3}), w1 = ls::randn({16, 32, 1, 1});
  const auto g3 = native::make_conv_geometry(x, w3, {}, {1}, {1}, {1}, 1, "test");
  const auto g1 = native::make_conv_geometry(x, w1, {}, {1}, {0}, {1}, 1, "test");
  for (auto pass : {native::ConvPass::Forward, native::ConvPass::BackwardData,
                    native::ConvPass::BackwardWeights}) {
    const std::string impl3 = native::conv_onednn_impl(g3, pass, false);
    const std::string impl1 = native::conv_onednn_impl(g1, pass, false);
    CAPTURE(impl3);
    CAPTURE(impl1);
    CHECK(impl3.find("(blocked)") != std::string::npos);
    CHECK(impl1.find("(plain)") != std::string::npos);
  }
}

TEST_CASE("conv onednn: threads sharing cached primitives get the single-thread results") {
  BackendGuard guard;
  ls::set_num_threads(1);
  ls::manual_seed(15);
  native::set_conv_backend(ConvBackend::OneDNN);
  Tensor x = ls::randn({4, 16, 12, 12}), w = ls::randn({32, 16, 3, 3}), b = ls::randn({32});
  Tensor y = native::conv2d_forward(x, w, b, {1}, {1}, {1}, 1);
  Tensor gy = ls::randn(y.sizes());
  auto [gx, gw, gb] = native::conv2d_backward(gy, x, w, {1}, {1}, {1}, 1, true, true, true);
  constexpr int kThreads = 4;
  std::vector<Results> got(kThreads);
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      ls::set_num_threads(1);  // OpenMP's thread count is per thread: match the cache key
      for (int rep = 0; rep < 5; ++rep) {
        got[t].y = native::conv2d_forward(x, w, b, {1}, {1}, {1}, 1);
        std::tie(got[t].gx, got[t].gw, got[t].gb) =
            native::conv2d_backward(gy, x, w, {1}, {1}, {1}, 1, true, true, true);
      }
    });
  }
  for (auto& worker : workers) worker.join();
  for (int t = 0; t < kThreads; ++t) {
    CAPTURE(t);
    // The same primitive on the same inputs: bit-identical.
    CHECK(native::allclose(got[t].y, y, 0, 0));
    CHECK(native::allclose(got[t].gx, gx, 0, 0));
    CHECK(native::allclose(got[t].gw, gw, 0, 0));
    CHECK(native::allclose(got[t].gb, gb, 0, 0));
  }
}
