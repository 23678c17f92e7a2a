// tests/core/test_batch_norm.cpp — native batch_norm_forward / batch_norm_backward
// against the formulas written out per channel.
//
// Training: per-channel batch mean and biased variance over N and the spatial
// dims, the normalised output, the saved statistics, and the running-statistic
// update with momentum and the unbiased variance (as PyTorch). Eval: the
// running statistics are used and left untouched. Backward: the eval formula
// directly, and the training formula's defining properties. One-pass statistics
// on data far from zero (Note [One-pass batch statistics]). The fused
// batch_norm_relu kernels against batch_norm followed by ReLU, and its backward
// with the mask from the input against the one from the output (Note [ReLU mask
// from the input]). Outputs large
// enough for streaming stores against the float64 kernels (Note [Streaming
// stores]).
// Read before: core/native/batch_norm.cpp, core/native/fused_relu.h.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/factory.h"
#include "core/native/fused_relu.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/rng.h"
#include "core/shape.h"
#include "tests/support/errors.h"

namespace ls = lockstep;
using lockstep::testing::error_of;
namespace native = lockstep::native;
using ls::IntList;
using ls::Tensor;

namespace {

// Per-channel statistics of x (N, C, S) read from a flat vector.
struct Stats {
  std::vector<double> mean, var;  // biased var
};

Stats stats_of(const std::vector<double>& x, int64_t n, int64_t c, int64_t s) {
  Stats st{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0)};
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) st.mean[ch] += x[(i * c + ch) * s + j];
    st.mean[ch] /= double(n * s);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) {
        const double d = x[(i * c + ch) * s + j] - st.mean[ch];
        st.var[ch] += d * d;
      }
    st.var[ch] /= double(n * s);
  }
  return st;
}

}  // namespace

TEST_CASE("batch_norm: training forward, saved statistics and running-stat update") {
  ls::manual_seed(5);
  const double eps = 1e-5, momentum = 0.1;
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
    for (IntList sizes : {IntList{6, 3}, IntList{4, 3, 5, 2}, IntList{3, 2, 7}}) {
      CAPTURE(ls::shape_str(sizes));
      const auto opts = ls::TensorOptions().dtype(dtype);
      const int64_t n = sizes[0], c = sizes[1], s = ls::numel_of(sizes) / (n * c);
      Tensor x = ls::randn(sizes, opts) * 2.0 + 0.5;
      Tensor w = ls::randn({c}, opts), b = ls::randn({c}, opts);
      Tensor rm = ls::randn({c}, opts), rv = ls::rand({c}, opts) + 0.5;
      const std::vector<double> rm0 = rm.to_vector<double>(), rv0 = rv.to_vector<double>();
      auto [y, save_mean, save_invstd] =
          native::batch_norm_forward(x, w, b, rm, rv, /*training=*/true, momentum, eps);
      const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
      const std::vector<double> wv = w.to_vector<double>(), bv = b.to_vector<double>();
      const Stats st = stats_of(xv, n, c, s);
      const double tol = dtype == ls::kFloat32 ? 1e-5 : 1e-12;
      for (int64_t ch = 0; ch < c; ++ch) {
        const double invstd = 1.0 / std::sqrt(st.var[ch] + eps);
        CHECK(save_mean.to_vector<double>()[ch] == doctest::Approx(st.mean[ch]).epsilon(tol));
        CHECK(save_invstd.to_vector<double>()[ch] == doctest::Approx(invstd).epsilon(tol));
        const double unbiased = st.var[ch] * double(n * s) / double(n * s - 1);
        CHECK(rm.to_vector<double>()[ch] ==
              doctest::Approx((1 - momentum) * rm0[ch] + momentum * st.mean[ch]).epsilon(tol));
        CHECK(rv.to_vector<double>()[ch] ==
              doctest::Approx((1 - momentum) * rv0[ch] + momentum * unbiased).epsilon(tol));
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < s; ++j) {
            const int64_t e = (i * c + ch) * s + j;
            const double expected = (xv[e] - st.mean[ch]) * invstd * wv[ch] + bv[ch];
            CHECK(yv[e] == doctest::Approx(expected).epsilon(tol * 10).scale(1.0));
          }
      }
    }
  }
}

TEST_CASE("batch_norm: without weight, bias or running stats, the version counter moves") {
  ls::manual_seed(6);
  Tensor x = ls::randn({5, 2, 3, 3}, ls::kFloat64);
  auto [y, m, is] = native::batch_norm_forward(x, {}, {}, {}, {}, true, 0.1, 1e-5);
  // Each channel of y is standardised: mean 0, biased variance var / (var + eps) ~ 1.
  const Stats st = stats_of(y.to_vector<double>(), 5, 2, 9);
  for (int64_t ch = 0; ch < 2; ++ch) {
    CHECK(st.mean[ch] == doctest::Approx(0.0).scale(1.0).epsilon(1e-12));
    CHECK(st.var[ch] == doctest::Approx(1.0).epsilon(1e-3));
  }
  Tensor rm = ls::zeros({2}, ls::kFloat64), rv = ls::ones({2}, ls::kFloat64);
  const uint64_t before = rm.impl()->storage->version();
  native::batch_norm_forward(x, {}, {}, rm, rv, true, 0.1, 1e-5);
  CHECK(rm.impl()->storage->version() > before);
  // momentum 1 replaces the running stats with the batch statistics.
  native::batch_norm_forward(x, {}, {}, rm, rv, true, 1.0, 1e-5);
  const Stats sx = stats_of(x.to_vector<double>(), 5, 2, 9);
  CHECK(rm.to_vector<double>()[1] == doctest::Approx(sx.mean[1]));
  CHECK(rv.to_vector<double>()[1] == doctest::Approx(sx.var[1] * 45.0 / 44.0));
}

TEST_CASE("batch_norm: eval uses the running statistics and leaves them untouched") {
  ls::manual_seed(7);
  const double eps = 1e-3;
  Tensor x = ls::randn({3, 4, 2, 2}, ls::kFloat64);
  Tensor w = ls::randn({4}, ls::kFloat64), b = ls::randn({4}, ls::kFloat64);
  Tensor rm = ls::randn({4}, ls::kFloat64), rv = ls::rand({4}, ls::kFloat64) + 0.5;
  const std::vector<double> rm0 = rm.to_vector<double>(), rv0 = rv.to_vector<double>();
  auto [y, m, is] = native::batch_norm_forward(x, w, b, rm, rv, /*training=*/false, 0.1, eps);
  CHECK(rm.to_vector<double>() == rm0);
  CHECK(rv.to_vector<double>() == rv0);
  const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  const std::vector<double> wv = w.to_vector<double>(), bv = b.to_vector<double>();
  for (size_t e = 0; e < xv.size(); ++e) {
    const size_t ch = (e / 4) % 4;
    const double expected = (xv[e] - rm0[ch]) / std::sqrt(rv0[ch] + eps) * wv[ch] + bv[ch];
    CHECK(yv[e] == doctest::Approx(expected));
  }
  // Eval backward: dx = g * w / sqrt(rv + eps), dw = sum g * xhat, db = sum g.
  Tensor gy = ls::randn(x.sizes(), ls::kFloat64);
  auto [gx, gw, gb] = native::batch_norm_backward(gy, x, w, m, is, false, true, true, true);
  const std::vector<double> gyv = gy.to_vector<double>(), gxv = gx.to_vector<double>();
  std::vector<double> gw_expected(4, 0.0), gb_expected(4, 0.0);
  for (size_t e = 0; e < xv.size(); ++e) {
    const size_t ch = (e / 4) % 4;
    const double invstd = 1.0 / std::sqrt(rv0[ch] + eps);
    CHECK(gxv[e] == doctest::Approx(gyv[e] * wv[ch] * invstd));
    gw_expected[ch] += gyv[e] * (xv[e] - rm0[ch]) * invstd;
    gb_expected[ch] += gyv[e];
  }
  for (size_t ch = 0; ch < 4; ++ch) {
    CHECK(gw.to_vector<double>()[ch] == doctest::Approx(gw_expected[ch]));
    CHECK(gb.to_vector<double>()[ch] == doctest::Approx(gb_expected[ch]));
  }
}

TEST_CASE("batch_norm: training backward removes the gradient's per-channel mean and xhat part") {
  // With y = xhat (no affine), dx = invstd * (g - mean(g) - xhat * mean(g * xhat)) per
  // channel, so sum(dx) = 0 and sum(dx * xhat) = 0, and a g that is constant per channel
  // (which cannot change the normalised output) gives dx = 0.
  ls::manual_seed(8);
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
    Tensor x = ls::randn({4, 3, 2, 2}, dtype);
    auto [y, m, is] = native::batch_norm_forward(x, {}, {}, {}, {}, true, 0.1, 1e-5);
    Tensor gy = ls::randn(x.sizes(), dtype);
    auto [gx, gw, gb] = native::batch_norm_backward(gy, x, {}, m, is, true, true, true, true);
    const std::vector<double> gxv = gx.to_vector<double>(), yv = y.to_vector<double>();
    for (size_t ch = 0; ch < 3; ++ch) {
      double s = 0, sx = 0;
      for (size_t e = 0; e < gxv.size(); ++e) {
        if ((e / 4) % 3 != ch) continue;
        s += gxv[e];
        sx += gxv[e] * yv[e];
      }
      CHECK(s == doctest::Approx(0.0).scale(1.0).epsilon(1e-4));
      CHECK(sx == doctest::Approx(0.0).scale(1.0).epsilon(1e-4));
    }
    Tensor constant = ls::ones(x.sizes(), dtype);
    auto [gx_c, gw_c, gb_c] =
        native::batch_norm_backward(constant, x, {}, m, is, true, true, false, false);
    for (double v : gx_c.to_vector<double>())
      CHECK(v == doctest::Approx(0.0).scale(1.0).epsilon(1e-4));
    CHECK_FALSE(gw_c.defined());
    CHECK_FALSE(gb_c.defined());
  }
}

TEST_CASE("batch_norm: errors name the op, the shapes and what to do") {
  Tensor x = ls::randn({4, 3, 2, 2});
  std::string m = error_of([&] {
    native::batch_norm_forward(ls::randn({1, 3}), {}, {}, {}, {}, true, 0.1, 1e-5);
  });
  CHECK(m.find("expected more than 1 value per channel when training") != std::string::npos);
  m = error_of([&] { native::batch_norm_forward(x, {}, {}, {}, {}, false, 0.1, 1e-5); });
  CHECK(m.find("eval mode needs running_mean and running_var") != std::string::npos);
  m = error_of([&] { native::batch_norm_forward(x, ls::ones({4}), {}, {}, {}, true, 0.1, 1e-5); });
  CHECK(m.find("weight must have shape [3]") != std::string::npos);
  m = error_of(
      [&] { native::batch_norm_forward(ls::randn({4}), {}, {}, {}, {}, true, 0.1, 1e-5); });
  CHECK(m.find("expected an input (N, C) or (N, C, *) but got shape [4]") != std::string::npos);
  m = error_of([&] {
    native::batch_norm_forward(x, {}, {}, ls::zeros({3}, ls::kFloat64), {}, true, 0.1, 1e-5);
  });
  CHECK(m.find("running_mean is float64 but input is float32") != std::string::npos);
}

TEST_CASE("batch_norm: one-pass statistics stay accurate when the mean dwarfs the spread") {
  // x = 1000 + 0.01 * randn in float32: sum(x^2) / M - mean^2 would lose every digit
  // of the variance (1e-4 next to 1e6); the shifted sums keep it.
  ls::manual_seed(9);
  const int64_t n = 4, c = 3, s = 50;
  Tensor x = ls::randn({n, c, s}) * 0.01 + 1000.0;
  auto [y, mean, invstd] = native::batch_norm_forward(x, {}, {}, {}, {}, true, 0.1, 1e-8);
  const Stats st = stats_of(x.to_vector<double>(), n, c, s);
  for (int64_t ch = 0; ch < c; ++ch) {
    CHECK(mean.to_vector<double>()[ch] == doctest::Approx(st.mean[ch]).epsilon(1e-6));
    CHECK(invstd.to_vector<double>()[ch] ==
          doctest::Approx(1.0 / std::sqrt(st.var[ch] + 1e-8)).epsilon(1e-3));
  }
}

TEST_CASE("batch_norm_relu: forward is relu(batch_norm), with the same statistics and update") {
  ls::manual_seed(10);
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
    for (bool training : {true, false}) {
      CAPTURE(training);
      const auto opts = ls::TensorOptions().dtype(dtype);
      Tensor x = ls::randn({3, 4, 5, 6}, opts), w = ls::randn({4}, opts), b = ls::randn({4}, opts);
      Tensor rm = ls::randn({4}, opts), rv = ls::rand({4}, opts) + 0.5;
      Tensor rm2 = rm.clone(), rv2 = rv.clone();
      auto [y, m, is] = native::batch_norm_forward(x, w, b, rm, rv, training, 0.1, 1e-5);
      auto [yr, mr, isr] = native::batch_norm_relu_forward(x, w, b, rm2, rv2, training, 0.1, 1e-5);
      CHECK(mr.to_vector<double>() == m.to_vector<double>());
      CHECK(isr.to_vector<double>() == is.to_vector<double>());
      CHECK(rm2.to_vector<double>() == rm.to_vector<double>());
      CHECK(rv2.to_vector<double>() == rv.to_vector<double>());
      const std::vector<double> yv = y.to_vector<double>(), yrv = yr.to_vector<double>();
      int64_t zeros = 0;
      for (size_t e = 0; e < yv.size(); ++e) {
        CHECK(yrv[e] == std::max(yv[e], 0.0));
        zeros += yrv[e] == 0.0;
      }
      CHECK(zeros > 0);  // the test exercises both sides of the ReLU
      CHECK(zeros < static_cast<int64_t>(yv.size()));
    }
  }
}

TEST_CASE("batch_norm_relu: backward is batch_norm_backward of the gradient masked by out > 0") {
  ls::manual_seed(11);
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
    for (bool training : {true, false}) {
      CAPTURE(training);
      const auto opts = ls::TensorOptions().dtype(dtype);
      Tensor x = ls::randn({2, 3, 7, 5}, opts), w = ls::randn({3}, opts), b = ls::randn({3}, opts);
      Tensor rm = ls::randn({3}, opts), rv = ls::rand({3}, opts) + 0.5;
      auto [y, m, is] = native::batch_norm_relu_forward(x, w, b, rm, rv, training, 0.1, 1e-5);
      Tensor gy = ls::randn(x.sizes(), opts);
      // The reference: mask the gradient first, then the plain batch-norm backward.
      Tensor masked = native::relu_backward(gy, y);
      auto [gx, gw, gb] =
          native::batch_norm_backward(masked, x, w, m, is, training, true, true, true);
      auto [fx, fw, fb] =
          native::batch_norm_relu_backward(gy, x, w, m, is, y, training, true, true, true);
      const double tol = dtype == ls::kFloat32 ? 1e-4 : 1e-12;
      auto close = [&](const Tensor& got, const Tensor& want) {
        const std::vector<double> g = got.to_vector<double>(), v = want.to_vector<double>();
        REQUIRE(g.size() == v.size());
        for (size_t e = 0; e < g.size(); ++e) {
          CHECK(g[e] == doctest::Approx(v[e]).epsilon(tol).scale(1.0));
        }
      };
      close(fx, gx);
      close(fw, gw);
      close(fb, gb);
      auto [only_x, none_w, none_b] =
          native::batch_norm_relu_backward(gy, x, w, m, is, y, training, true, false, false);
      close(only_x, gx);
      CHECK_FALSE(none_w.defined());
      CHECK_FALSE(none_b.defined());
    }
  }
}

TEST_CASE("batch_norm_relu: errors name the op and the saved output's shape") {
  Tensor x = ls::randn({4, 3, 2, 2});
  auto [y, m, is] = native::batch_norm_relu_forward(x, {}, {}, {}, {}, true, 0.1, 1e-5);
  std::string msg = error_of([&] {
    native::batch_norm_relu_backward(ls::randn(x.sizes()), x, {}, m, is, ls::randn({4, 3}), true,
                                     true, false, false);
  });
  CHECK(msg.find("batch_norm_relu_backward") != std::string::npos);
  CHECK(msg.find("the saved output (float32 [4, 3])") != std::string::npos);
  msg = error_of([&] {
    native::batch_norm_relu_forward(ls::randn({1, 3}), {}, {}, {}, {}, true, 0.1, 1e-5);
  });
  CHECK(msg.find("batch_norm_relu: expected more than 1 value per channel") != std::string::npos);
}

TEST_CASE("batch_norm_relu: the backward with the mask from the input equals the one from the output") {
  // Note [ReLU mask from the input]: plain loops (small), streaming kernels with
  // unaligned runs and partial vectors (S odd, above kStreamingBytes), float64,
  // eval and training, with and without weight and bias.
  ls::manual_seed(21);
  // float32 with the explicit AVX-512 loops to the bit; float64, and float32 on a
  // CPU without AVX-512 (compiler-vectorised sums, which may add in another order),
  // to rounding: a mask that differed anywhere would move a value by O(1).
#if defined(__AVX512F__)
  constexpr bool kFloatToTheBit = true;
#else
  constexpr bool kFloatToTheBit = false;
#endif
  auto same = [&](const Tensor& a, const Tensor& b) {
    REQUIRE(a.defined() == b.defined());
    if (!a.defined()) return;
    const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
    if (a.dtype() == ls::kFloat32 && kFloatToTheBit) {
      CHECK(av == bv);
      return;
    }
    const double tol = a.dtype() == ls::kFloat32 ? 1e-4 : 1e-12;
    REQUIRE(av.size() == bv.size());
    double worst = 0, largest = 0;
    for (size_t e = 0; e < av.size(); ++e) {
      worst = std::max(worst, std::abs(av[e] - bv[e]));
      largest = std::max(largest, std::abs(bv[e]));
    }
    CHECK(worst <= tol * (1.0 + largest));
  };
  const std::vector<IntList> shapes = {{2, 3, 7, 5}, {2, 4, 521, 1013}};
  for (const IntList& shape : shapes) {
    for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
      for (bool training : {true, false}) {
        for (bool affine : {true, false}) {
          CAPTURE(shape.size());
          CAPTURE(training);
          CAPTURE(affine);
          const auto opts = ls::TensorOptions().dtype(dtype);
          const int64_t c = shape[1];
          Tensor x = ls::randn(shape, opts), gy = ls::randn(shape, opts);
          Tensor w = affine ? ls::randn({c}, opts) : Tensor();
          Tensor b = affine ? ls::randn({c}, opts) : Tensor();
          Tensor rm = ls::randn({c}, opts), rv = ls::rand({c}, opts) + 0.5;
          auto [y, m, is] = native::batch_norm_relu_forward(x, w, b, rm, rv, training, 0.1, 1e-5);
          auto [gx, gw, gb] =
              native::batch_norm_relu_backward(gy, x, w, m, is, y, training, true, affine, affine);
          auto [fx, fw, fb] = native::batch_norm_relu_backward_from_input(
              gy, x, w, b, m, is, training, true, affine, affine);
          same(fx, gx);
          same(fw, gw);
          same(fb, gb);
        }
      }
    }
  }
}

TEST_CASE("batch_norm_relu: the input mask keeps values at the ReLU's edge on the forward's side") {
  // Eval with mean 0, var + eps = 1, weight 1, bias 0: y = relu(x) exactly, so
  // 0, -0 and the smallest floats of either sign sit on the edge.
  const float tiny = std::numeric_limits<float>::denorm_min();
  Tensor x = ls::tensor(std::vector<float>{0.0f, -0.0f, tiny, -tiny, 1e-30f, -1e-30f, 2.0f, -2.0f},
                        {1, 1, 8});
  Tensor gy = ls::ones({1, 1, 8});
  Tensor w = ls::ones({1}), b = ls::zeros({1}), rm = ls::zeros({1}), rv = ls::full({1}, 1.0 - 1e-5);
  auto [y, m, is] = native::batch_norm_relu_forward(x, w, b, rm, rv, false, 0.1, 1e-5);
  auto [gx, gw, gb] = native::batch_norm_relu_backward(gy, x, w, m, is, y, false, true, true, true);
  auto [fx, fw, fb] =
      native::batch_norm_relu_backward_from_input(gy, x, w, b, m, is, false, true, true, true);
  const std::vector<float> out = y.to_vector<float>();
  CHECK(std::count_if(out.begin(), out.end(), [](float v) { return v > 0; }) == 3);  // tiny, 1e-30, 2
  CHECK(fx.to_vector<double>() == gx.to_vector<double>());
  CHECK(fb.to_vector<double>() == gb.to_vector<double>());
}

TEST_CASE("batch_norm_relu_backward_from_input: errors name the op and the bias") {
  Tensor x = ls::randn({4, 3, 2, 2});
  auto [y, m, is] = native::batch_norm_relu_forward(x, {}, {}, {}, {}, true, 0.1, 1e-5);
  const std::string msg = error_of([&] {
    native::batch_norm_relu_backward_from_input(ls::randn(x.sizes()), x, {}, ls::randn({4}), m,
                                                is, true, true, false, false);
  });
  CHECK(msg.find("batch_norm_relu_backward_from_input") != std::string::npos);
  CHECK(msg.find("bias must have shape [3]") != std::string::npos);
}

TEST_CASE("batch_norm: outputs above kStreamingBytes (streaming stores) match float64") {
  // (2, 4, 521, 1013): 4.2M floats, 16.9 MB, above kStreamingBytes, so float32
  // forward and grad_input take the streaming kernels (Note [Streaming stores]);
  // S = 527773 is odd, so runs start unaligned and end in a partial vector. The
  // float64 computation of the same values never streams.
  ls::manual_seed(12);
  const IntList shape{2, 4, 521, 1013};
  Tensor x = ls::randn(shape), gy = ls::randn(shape), w = ls::randn({4}), b = ls::randn({4});
  auto f64 = [](const Tensor& t) { return t.to(ls::kFloat64); };
  auto close = [](const Tensor& got, const Tensor& want, double tol) {
    const std::vector<double> g = got.to_vector<double>(), v = want.to_vector<double>();
    REQUIRE(g.size() == v.size());
    double worst = 0;
    for (size_t e = 0; e < g.size(); ++e) worst = std::max(worst, std::abs(g[e] - v[e]));
    CHECK(worst < tol);
  };
  for (bool relu : {false, true}) {
    CAPTURE(relu);
    auto forward = relu ? native::batch_norm_relu_forward : native::batch_norm_forward;
    auto [y, m, is] = forward(x, w, b, {}, {}, true, 0.1, 1e-5);
    auto [y64, m64, is64] = forward(f64(x), f64(w), f64(b), {}, {}, true, 0.1, 1e-5);
    close(y, y64, 1e-4);
    std::tuple<Tensor, Tensor, Tensor> grads, grads64;
    if (relu) {
      grads = native::batch_norm_relu_backward(gy, x, w, m, is, y, true, true, true, true);
      // The float32 output's mask for both: where y is within rounding of 0 the
      // float64 output may fall on the other side of the ReLU.
      grads64 = native::batch_norm_relu_backward(f64(gy), f64(x), f64(w), m64, is64, f64(y),
                                                 true, true, true, true);
    } else {
      grads = native::batch_norm_backward(gy, x, w, m, is, true, true, true, true);
      grads64 = native::batch_norm_backward(f64(gy), f64(x), f64(w), m64, is64, true, true, true,
                                            true);
    }
    close(std::get<0>(grads), std::get<0>(grads64), 1e-4);
    // grad_weight and grad_bias sum 1M values each: relative to their size.
    const double big = 1e-5 * static_cast<double>(x.numel() / 4);
    close(std::get<1>(grads), std::get<1>(grads64), big);
    close(std::get<2>(grads), std::get<2>(grads64), big);
  }
}

TEST_CASE("batch_norm_add_relu: the streaming and plain kernels, forward and backward, match float64") {
  // (2, 4, 521, 1013) float32 is above kStreamingBytes (Note [Streaming stores]);
  // (2, 4, 9, 7) is not. Each against the float64 computation of relu(bn(x) + r).
  ls::manual_seed(13);
  for (const IntList& shape : {IntList{2, 4, 521, 1013}, IntList{2, 4, 9, 7}}) {
    CAPTURE(shape[2]);
    Tensor x = ls::randn(shape), r = ls::randn(shape), w = ls::randn({4}), b = ls::randn({4});
    auto f64 = [](const Tensor& t) { return t.to(ls::kFloat64); };
    auto [y, m, is] = native::batch_norm_add_relu_forward(x, r, w, b, {}, {}, true, 0.1, 1e-5);
    auto [bn64, m64, is64] =
        native::batch_norm_forward(f64(x), f64(w), f64(b), {}, {}, true, 0.1, 1e-5);
    const std::vector<double> got = y.to_vector<double>();
    const std::vector<double> want = (bn64 + f64(r)).relu().to_vector<double>();
    REQUIRE(got.size() == want.size());
    double worst = 0;
    for (size_t e = 0; e < got.size(); ++e) worst = std::max(worst, std::abs(got[e] - want[e]));
    CHECK(worst < 1e-4);
    CHECK(m.to_vector<double>()[0] == doctest::Approx(m64.to_vector<double>()[0]).epsilon(1e-5));
    // Backward: the one-kernel float32 path against the two float64 backwards in
    // turn, both masked by the float32 output (see the batch_norm_relu case above).
    Tensor gy = ls::randn(shape);
    auto [gx, gw, gb, gr] =
        native::batch_norm_add_relu_backward(gy, x, w, m, is, y, true, true, true, true);
    Tensor g64 = native::add_relu_backward(f64(gy), f64(y));
    auto [gx64, gw64, gb64] =
        native::batch_norm_backward(g64, f64(x), f64(w), m64, is64, true, true, true, true);
    auto max_diff = [](const Tensor& a, const Tensor& b) {
      const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
      REQUIRE(av.size() == bv.size());
      double d = 0;
      for (size_t e = 0; e < av.size(); ++e) d = std::max(d, std::abs(av[e] - bv[e]));
      return d;
    };
    CHECK(max_diff(gr, g64) == 0.0);  // a mask: exact
    CHECK(max_diff(gx, gx64) < 1e-4);
    const double big = 1e-5 * static_cast<double>(x.numel() / 4);
    CHECK(max_diff(gw, gw64) < big);
    CHECK(max_diff(gb, gb64) < big);
    auto [no_x, only_w, no_b, r_only] =
        native::batch_norm_add_relu_backward(gy, x, w, m, is, y, true, false, true, false);
    CHECK_FALSE(no_x.defined());
    CHECK(max_diff(only_w, gw) == 0.0);
    CHECK(max_diff(r_only, gr) == 0.0);
  }
}
