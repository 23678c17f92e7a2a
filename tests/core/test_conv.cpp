// tests/core/test_conv.cpp — native::conv2d_forward / conv2d_backward against a
// direct convolution.
//
// `direct_conv` below is the definition written as seven nested loops over
// doubles (batch, group, output channel, output row, output column, input
// channel, kernel row, kernel column — the kernel loops fused); its backward
// (`direct_conv_backward`) walks the same loops and scatters each product's
// partial derivatives. Every stride/padding/dilation/groups combination below,
// including depthwise and the 1x1 fast path, is compared with them in float64
// (the reference backend) and in float32 on both backends (see Note
// [Convolution backends]), on one and on several threads (the batch-parallel path).
// tests/core/test_conv_onednn.cpp compares the two backends on more geometries.
// Read before: core/native/conv.cpp.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/parallel.h"
#include "core/rng.h"

namespace ls = lockstep;
namespace native = lockstep::native;
using ls::IntList;
using ls::Tensor;

namespace {

struct ConvCase {
  int64_t n, c_in, h, w, c_out, kh, kw;
  IntList stride, padding, dilation;
  int64_t groups;
  bool bias;
};

struct Dims {
  int64_t sh, sw, ph, pw, dh, dw, oh, ow;
};

Dims dims_of(const ConvCase& c) {
  Dims d{};
  d.sh = c.stride.front(), d.sw = c.stride.back();
  d.ph = c.padding.front(), d.pw = c.padding.back();
  d.dh = c.dilation.front(), d.dw = c.dilation.back();
  d.oh = (c.h + 2 * d.ph - d.dh * (c.kh - 1) - 1) / d.sh + 1;
  d.ow = (c.w + 2 * d.pw - d.dw * (c.kw - 1) - 1) / d.sw + 1;
  return d;
}

// Calls fn(out_index, in_index, weight_index) for every product of the convolution.
template <class F>
void for_each_product(const ConvCase& c, F&& fn) {
  const Dims d = dims_of(c);
  const int64_t cin_g = c.c_in / c.groups, cout_g = c.c_out / c.groups;
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t g = 0; g < c.groups; ++g)
      for (int64_t oc = g * cout_g; oc < (g + 1) * cout_g; ++oc)
        for (int64_t oy = 0; oy < d.oh; ++oy)
          for (int64_t ox = 0; ox < d.ow; ++ox)
            for (int64_t ic = 0; ic < cin_g; ++ic)
              for (int64_t k = 0; k < c.kh * c.kw; ++k) {
                const int64_t ki = k / c.kw, kj = k % c.kw;
                const int64_t iy = oy * d.sh - d.ph + ki * d.dh;
                const int64_t ix = ox * d.sw - d.pw + kj * d.dw;
                if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
                const int64_t out = ((n * c.c_out + oc) * d.oh + oy) * d.ow + ox;
                const int64_t in = ((n * c.c_in + g * cin_g + ic) * c.h + iy) * c.w + ix;
                const int64_t wt = ((oc * cin_g + ic) * c.kh + ki) * c.kw + kj;
                fn(out, in, wt);
              }
}

std::vector<double> direct_conv(const ConvCase& c, const std::vector<double>& x,
                                const std::vector<double>& w, const std::vector<double>& b) {
  const Dims d = dims_of(c);
  std::vector<double> y(static_cast<size_t>(c.n * c.c_out * d.oh * d.ow), 0.0);
  for (size_t i = 0; i < y.size(); ++i) {
    if (c.bias) y[i] = b[(i / static_cast<size_t>(d.oh * d.ow)) % static_cast<size_t>(c.c_out)];
  }
  for_each_product(c, [&](int64_t o, int64_t i, int64_t k) { y[o] += x[i] * w[k]; });
  return y;
}

struct Grads {
  std::vector<double> input, weight, bias;
};

Grads direct_conv_backward(const ConvCase& c, const std::vector<double>& gy,
                           const std::vector<double>& x, const std::vector<double>& w) {
  const Dims d = dims_of(c);
  Grads g{std::vector<double>(x.size(), 0.0), std::vector<double>(w.size(), 0.0),
          std::vector<double>(static_cast<size_t>(c.c_out), 0.0)};
  for_each_product(c, [&](int64_t o, int64_t i, int64_t k) {
    g.input[i] += gy[o] * w[k];
    g.weight[k] += gy[o] * x[i];
  });
  for (size_t i = 0; i < gy.size(); ++i) {
    g.bias[(i / static_cast<size_t>(d.oh * d.ow)) % static_cast<size_t>(c.c_out)] += gy[i];
  }
  return g;
}

void check_close(const Tensor& t, const std::vector<double>& expected, double tol) {
  REQUIRE(t.defined());
  std::vector<double> got = t.to_vector<double>();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == doctest::Approx(expected[i]).epsilon(tol).scale(1.0));
  }
}

const std::vector<ConvCase>& cases() {
  static const std::vector<ConvCase> all = {
      {2, 3, 7, 6, 4, 3, 3, {1}, {0}, {1}, 1, true},           // plain 3x3
      {2, 3, 7, 6, 4, 3, 3, {1}, {1}, {1}, 1, false},          // "same" padding, no bias
      {3, 2, 9, 8, 3, 3, 2, {2}, {1}, {1}, 1, true},           // stride 2, non-square kernel
      {2, 2, 8, 9, 2, 3, 3, {1, 2}, {2, 0}, {2, 1}, 1, true},  // per-dim stride/padding/dilation
      {2, 4, 6, 6, 6, 3, 3, {1}, {1}, {2}, 2, true},           // dilation 2, groups 2
      {2, 4, 6, 5, 4, 3, 3, {2}, {1}, {1}, 4, true},           // depthwise, stride 2
      {3, 4, 5, 5, 6, 1, 1, {1}, {0}, {1}, 1, true},           // 1x1 fast path
      {2, 4, 5, 4, 6, 1, 1, {1}, {0}, {1}, 2, false},          // 1x1 fast path, grouped
      {2, 3, 6, 6, 4, 1, 1, {2}, {0}, {1}, 1, true},           // 1x1 strided (im2col path)
      {1, 2, 5, 5, 3, 5, 5, {1}, {2}, {1}, 1, true},           // kernel as large as the input
      {5, 3, 10, 10, 8, 7, 7, {2}, {3}, {1}, 1, true},         // ResNet stem shape, small
  };
  return all;
}

void run_case(const ConvCase& c, ls::ScalarType dtype, double tol) {
  const auto opts = ls::TensorOptions().dtype(dtype);
  Tensor x = ls::randn({c.n, c.c_in, c.h, c.w}, opts);
  Tensor w = ls::randn({c.c_out, c.c_in / c.groups, c.kh, c.kw}, opts);
  Tensor b = c.bias ? ls::randn({c.c_out}, opts) : Tensor();
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const std::vector<double> bv = c.bias ? b.to_vector<double>() : std::vector<double>{};

  Tensor y = native::conv2d_forward(x, w, b, c.stride, c.padding, c.dilation, c.groups);
  const Dims d = dims_of(c);
  CHECK(y.sizes() == IntList{c.n, c.c_out, d.oh, d.ow});
  CHECK(y.dtype() == dtype);
  check_close(y, direct_conv(c, xv, wv, bv), tol);

  Tensor gy = ls::randn(y.sizes(), opts);
  auto [gx, gw, gb] = native::conv2d_backward(gy, x, w, c.stride, c.padding, c.dilation, c.groups,
                                              true, true, true);
  const Grads expected = direct_conv_backward(c, gy.to_vector<double>(), xv, wv);
  check_close(gx, expected.input, tol);
  check_close(gw, expected.weight, tol);
  check_close(gb, expected.bias, tol);
  CHECK(gw.sizes() == w.sizes());

  // Only the requested gradients are computed.
  auto [gx2, gw2, gb2] = native::conv2d_backward(gy, x, w, c.stride, c.padding, c.dilation,
                                                 c.groups, false, true, false);
  CHECK_FALSE(gx2.defined());
  CHECK_FALSE(gb2.defined());
  check_close(gw2, expected.weight, tol);
}

}  // namespace

TEST_CASE("conv: forward and backward match a direct convolution (float64 and float32)") {
  ls::manual_seed(1);
  const int saved_threads = ls::get_num_threads();
  const native::ConvBackend saved_backend = native::conv_backend();
  for (int threads : {1, 3}) {
    ls::set_num_threads(threads);
    for (size_t i = 0; i < cases().size(); ++i) {
      CAPTURE(threads);
      CAPTURE(i);
      run_case(cases()[i], ls::kFloat64, 1e-10);
      for (auto backend : {native::ConvBackend::Reference, native::ConvBackend::OneDNN}) {
        const std::string backend_name = native::conv_backend_name(backend);
        CAPTURE(backend_name);
        native::set_conv_backend(backend);
        run_case(cases()[i], ls::kFloat32, 1e-4);
      }
    }
  }
  native::set_conv_backend(saved_backend);
  ls::set_num_threads(saved_threads);
}

TEST_CASE("conv: non-contiguous inputs give the same result as contiguous copies") {
  ls::manual_seed(2);
  Tensor x = ls::randn({2, 3, 6, 5}, ls::kFloat64).transpose(2, 3);  // (2, 3, 5, 6) view
  Tensor w = ls::randn({4, 3, 3, 2}, ls::kFloat64).transpose(2, 3);  // (4, 3, 2, 3) view
  Tensor b = ls::randn({8}, ls::kFloat64).narrow(0, 0, 4);
  Tensor y = native::conv2d_forward(x, w, b, {1}, {1}, {1}, 1);
  Tensor y_ref = native::conv2d_forward(native::contiguous(x), native::contiguous(w),
                                        native::contiguous(b), {1}, {1}, {1}, 1);
  CHECK(native::allclose(y, y_ref, 0, 0));
}

TEST_CASE("conv: errors name the op, the shapes and what to do") {
  Tensor x = ls::randn({2, 4, 5, 5});
  Tensor w = ls::randn({6, 2, 3, 3});
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const ls::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string m = message([&] {
    native::conv2d_forward(ls::randn({4, 5, 5}), w, {}, {1}, {0}, {1}, 2);
  });
  CHECK(m.find("expected a 4-d input (N, C, H, W) but got shape [4, 5, 5]") != std::string::npos);
  m = message([&] { native::conv2d_forward(x, w, {}, {1}, {0}, {1}, 1); });
  CHECK(m.find("C_in must equal weight.size(1) * groups") != std::string::npos);
  CHECK(m.find("[2, 4, 5, 5]") != std::string::npos);
  m = message([&] { native::conv2d_forward(x, ls::randn({5, 1, 3, 3}), {}, {1}, {0}, {1}, 4); });
  CHECK(m.find("not divisible by groups = 4") != std::string::npos);
  m = message([&] {
    native::conv2d_forward(ls::randn({1, 2, 3, 3}), ls::randn({1, 2, 5, 5}), {}, {1}, {0}, {1}, 1);
  });
  CHECK(m.find("input 3x3 is too small for kernel 5x5 with padding 0") != std::string::npos);
  m = message([&] { native::conv2d_forward(x, w, {}, {1, 1, 1}, {0}, {1}, 2); });
  CHECK(m.find("stride must have 1 or 2 values") != std::string::npos);
  m = message(
      [&] { native::conv2d_forward(native::to_dtype(x, ls::kInt64), w, {}, {1}, {0}, {1}, 2); });
  CHECK(m.find("float32") != std::string::npos);
  m = message([&] { native::conv2d_forward(x, w, ls::randn({5}), {1}, {0}, {1}, 2); });
  CHECK(m.find("bias must have shape [6]") != std::string::npos);
  m = message([&] { native::conv2d_forward(x, w, {}, {0}, {0}, {1}, 2); });
  CHECK(m.find("stride must be positive") != std::string::npos);
}
