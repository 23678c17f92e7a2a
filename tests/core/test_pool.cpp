// tests/core/test_pool.cpp — native max_pool2d and adaptive_avg_pool2d against
// their definitions.
//
// max_pool2d: every output is compared with the maximum over its window,
// computed directly (out-of-plane positions skipped), and its index must point
// at that maximum; the backward must put each grad_output element at the
// position of its maximum; inputs full of ties, NaNs and -inf exercise each
// fast path of Note [Max-pool fast path]. adaptive_avg_pool2d: windows from PyTorch's formula
// written with floating floor/ceil, a hand-worked overlapping case, and the
// backward as the transpose of the forward (<gy, pool(x)> == <pool_backward(gy), x>).
// The float32 separable path (Note [Separable max-pool]) is also checked with its
// AVX-512 kernels on and off and with streamed outputs, against the definition
// and against the float64 path (the per-window code), and its backward scatter
// against a plain loop, bit for bit.
// Read before: core/native/pool.cpp, core/native/fast/pool_max_fast.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/native/fast/pool_max_fast.h"
#include "core/native/pool_rules.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/shape.h"
#include "tests/support/errors.h"

namespace ls = lockstep;
using lockstep::testing::error_of;
namespace native = lockstep::native;
using ls::IntList;
using ls::Tensor;

namespace {

double dot(const Tensor& a, const Tensor& b) {
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < av.size(); ++i) s += av[i] * bv[i];
  return s;
}

struct PoolCase {
  IntList kernel, stride, padding;
};

// Checks max_pool2d_forward/backward on x (N, C, H, W) against the definition:
// the first maximum of each window in row-major order, or its last NaN (PyTorch's
// rule); an all -inf window points at its first in-plane position.
void check_max_pool(const Tensor& x, const PoolCase& pc) {
  CAPTURE(ls::shape_str(x.sizes()));
  CAPTURE(ls::shape_str(pc.kernel));
  CAPTURE(ls::shape_str(pc.stride));
  CAPTURE(ls::shape_str(pc.padding));
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  auto [y, idx] = native::max_pool2d_forward(x, pc.kernel, pc.stride, pc.padding);
  const int64_t kh = pc.kernel.front(), kw = pc.kernel.back();
  const int64_t sh = pc.stride.empty() ? kh : pc.stride.front();
  const int64_t sw = pc.stride.empty() ? kw : pc.stride.back();
  const int64_t ph = pc.padding.front(), pw = pc.padding.back();
  const int64_t oh = (h + 2 * ph - kh) / sh + 1, ow = (w + 2 * pw - kw) / sw + 1;
  REQUIRE(y.sizes() == IntList{n, c, oh, ow});
  REQUIRE(idx.dtype() == ls::kInt64);
  const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  const std::vector<int64_t> iv = idx.to_vector<int64_t>();
  Tensor gy = ls::randn(y.sizes(), ls::TensorOptions().dtype(x.dtype()));
  const std::vector<double> gyv = gy.to_vector<double>();
  std::vector<double> expected_gx(xv.size(), 0.0);
  int64_t wrong_values = 0, wrong_indices = 0;
  for (int64_t p = 0; p < n * c; ++p) {
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        const int64_t y0 = std::max<int64_t>(oy * sh - ph, 0), x0 = std::max<int64_t>(ox * sw - pw, 0);
        double best = -std::numeric_limits<double>::infinity();
        int64_t best_at = y0 * w + x0;
        for (int64_t iy = oy * sh - ph; iy < oy * sh - ph + kh; ++iy) {
          for (int64_t ix = ox * sw - pw; ix < ox * sw - pw + kw; ++ix) {
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            const double v = xv[p * h * w + iy * w + ix];
            if (v > best || std::isnan(v)) {
              best = v;
              best_at = iy * w + ix;
            }
          }
        }
        const int64_t o = (p * oh + oy) * ow + ox;
        const bool same = std::isnan(best) ? std::isnan(yv[o]) : yv[o] == best;
        wrong_values += same ? 0 : 1;
        wrong_indices += iv[o] == best_at ? 0 : 1;
        expected_gx[p * h * w + best_at] += gyv[o];
      }
    }
  }
  CHECK(wrong_values == 0);
  CHECK(wrong_indices == 0);
  Tensor gx = native::max_pool2d_backward(gy, idx, x.sizes());
  REQUIRE(gx.sizes() == x.sizes());
  std::vector<double> gxv = gx.to_vector<double>();
  int64_t wrong_grads = 0;
  for (size_t i = 0; i < gxv.size(); ++i) {
    wrong_grads += gxv[i] == doctest::Approx(expected_gx[i]) ? 0 : 1;
  }
  CHECK(wrong_grads == 0);
}

// Small integers (many ties, as after a ReLU) with NaNs and -inf sprinkled in
// at the given rates; float64 so that it converts exactly to float32.
Tensor tie_heavy_input(const IntList& sizes, double nan_rate, double neg_inf_rate) {
  int64_t numel = 1;
  for (int64_t d : sizes) numel *= d;
  const std::vector<double> rv = ls::randint(0, 4, {numel}).to_vector<double>();
  const std::vector<double> uv = ls::rand({numel}).to_vector<double>();
  std::vector<double> v(static_cast<size_t>(numel));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = rv[i];
    if (uv[i] < nan_rate) v[i] = std::nan("");
    if (uv[i] > 1.0 - neg_inf_rate) v[i] = -std::numeric_limits<double>::infinity();
  }
  return ls::tensor(v, sizes);
}

// The per-window definition on float32 data: values and flat indices, planes
// of h x w laid end to end (written independently of the library's kernels).
void reference_max_pool(const std::vector<float>& x, int64_t planes,
                        const native::rules::PoolWindow& p, std::vector<float>& values,
                        std::vector<int64_t>& indices) {
  values.assign(static_cast<size_t>(planes * p.oh * p.ow), 0.0f);
  indices.assign(values.size(), -1);
  for (int64_t plane = 0; plane < planes; ++plane) {
    for (int64_t oy = 0; oy < p.oh; ++oy) {
      for (int64_t ox = 0; ox < p.ow; ++ox) {
        float best = -std::numeric_limits<float>::infinity();
        const int64_t y0 = std::max<int64_t>(oy * p.sh - p.ph, 0);
        const int64_t x0 = std::max<int64_t>(ox * p.sw - p.pw, 0);
        int64_t at = y0 * p.w + x0;
        for (int64_t iy = oy * p.sh - p.ph; iy < oy * p.sh - p.ph + p.kh; ++iy) {
          for (int64_t ix = ox * p.sw - p.pw; ix < ox * p.sw - p.pw + p.kw; ++ix) {
            if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w) continue;
            const float v = x[static_cast<size_t>(plane * p.h * p.w + iy * p.w + ix)];
            if (v > best || std::isnan(v)) {
              best = v;
              at = iy * p.w + ix;
            }
          }
        }
        values[static_cast<size_t>((plane * p.oh + oy) * p.ow + ox)] = best;
        indices[static_cast<size_t>((plane * p.oh + oy) * p.ow + ox)] = at;
      }
    }
  }
}

// How many of got's values differ from want's bit for bit (NaN matches NaN).
int64_t count_value_mismatches(const std::vector<float>& got, const std::vector<float>& want) {
  int64_t wrong = got.size() == want.size() ? 0 : 1;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const bool same_bits = got[i] == want[i] && std::signbit(got[i]) == std::signbit(want[i]);
    const bool same = std::isnan(want[i]) ? std::isnan(got[i]) : same_bits;
    wrong += same ? 0 : 1;
  }
  return wrong;
}

}  // namespace

TEST_CASE("pool: max_pool2d values, indices and backward match the direct definition") {
  ls::manual_seed(3);
  const std::vector<PoolCase> cases = {
      {{2}, {2}, {0}},          {{3}, {2}, {1}}, {{3}, {1}, {1}},
      {{2, 3}, {1, 2}, {1, 0}}, {{3}, {}, {0}},  {{1}, {1}, {0}},
  };
  const int saved_threads = ls::get_num_threads();
  for (int threads : {1, 2}) {
    ls::set_num_threads(threads);
    for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
      for (const PoolCase& pc : cases) {
        CAPTURE(threads);
        check_max_pool(ls::randn({2, 3, 7, 8}, ls::TensorOptions().dtype(dtype)), pc);
      }
    }
  }
  ls::set_num_threads(saved_threads);
}

TEST_CASE("pool: max_pool2d fast paths keep ties, NaNs and -inf as the definition") {
  // Note [Max-pool fast path]: unpadded side-by-side windows (kw <= sw), the
  // per-row interior path with padding, rows longer than one chunk (128), odd
  // sizes with leftover rows/columns, and windows overlapping. Values are
  // small integers (many ties, as after a ReLU), with NaNs and -inf sprinkled in.
  ls::manual_seed(5);
  const std::vector<std::pair<IntList, PoolCase>> cases = {
      {{2, 3, 28, 28}, {{2}, {2}, {0}}},          // the small CNN's pools
      {{2, 2, 14, 14}, {{2}, {2}, {0}}},
      {{1, 2, 9, 11}, {{2}, {2}, {0}}},           // leftover row and column
      {{1, 2, 10, 12}, {{3}, {3}, {0}}},          // side by side, stride 3
      {{1, 2, 9, 13}, {{2, 1}, {3, 2}, {0}}},     // kw < sw
      {{1, 2, 3, 300}, {{2}, {2}, {0}}},          // output rows longer than a chunk
      {{1, 2, 11, 300}, {{3}, {2}, {1}}},         // ResNet-like, padded, long rows
      {{1, 2, 12, 15}, {{3}, {2}, {0}}},          // overlapping, unpadded
      {{1, 2, 8, 9}, {{3, 2}, {1, 1}, {1, 1}}},   // stride 1, padded both ways
  };
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
    for (const auto& [sizes, pc] : cases) {
      int64_t numel = 1;
      for (int64_t d : sizes) numel *= d;
      std::vector<double> v(static_cast<size_t>(numel));
      Tensor r = ls::randint(0, 4, {numel});
      const std::vector<double> rv = r.to_vector<double>();
      Tensor u = ls::rand({numel});
      const std::vector<double> uv = u.to_vector<double>();
      for (size_t i = 0; i < v.size(); ++i) {
        v[i] = rv[i];
        if (uv[i] < 0.02) v[i] = std::nan("");
        if (uv[i] > 0.97) v[i] = -std::numeric_limits<double>::infinity();
      }
      check_max_pool(native::to_dtype(ls::tensor(v, sizes), dtype), pc);
    }
  }
  // Every value -inf: each index is its window's first in-plane position.
  check_max_pool(ls::full({1, 1, 6, 6}, -std::numeric_limits<double>::infinity()),
                 {{2}, {2}, {0}});
}

TEST_CASE("pool: max_pool2d of a hand-worked plane, and NaN propagates") {
  // 1 2 3 4 / 5 6 7 8 / 9 10 11 12, kernel 2, stride 2 -> 6 8 at flat positions 5 and 7.
  Tensor x = ls::arange(1, 13, 1, ls::kFloat32).reshape({1, 1, 3, 4});
  auto [y, idx] = native::max_pool2d_forward(x, {2}, {2}, {0});
  CHECK(y.to_vector<float>() == std::vector<float>{6, 8});
  CHECK(idx.to_vector<int64_t>() == std::vector<int64_t>{5, 7});
  // Padding 1 with kernel 3, stride 1: the corner window sees 1, 2, 5, 6 only.
  auto [y2, idx2] = native::max_pool2d_forward(x, {3}, {1}, {1});
  CHECK(y2.to_vector<float>()[0] == 6);
  std::vector<float> v = x.to_vector<float>();
  v[0] = std::nanf("");
  auto [y3, idx3] = native::max_pool2d_forward(ls::tensor(v, {1, 1, 3, 4}), {2}, {2}, {0});
  CHECK(std::isnan(y3.to_vector<float>()[0]));
  CHECK(idx3.to_vector<int64_t>()[0] == 0);
}

TEST_CASE("pool: adaptive_avg_pool2d windows follow PyTorch's floor/ceil formula") {
  ls::manual_seed(4);
  const int64_t n = 2, c = 3, h = 5, w = 7;
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
    Tensor x = ls::randn({n, c, h, w}, ls::TensorOptions().dtype(dtype));
    const std::vector<double> xv = x.to_vector<double>();
    for (IntList out : {IntList{1}, IntList{2, 3}, IntList{3}, IntList{5, 7}, IntList{7, 9}}) {
      CAPTURE(ls::shape_str(out));
      const int64_t oh = out.front(), ow = out.back();
      Tensor y = native::adaptive_avg_pool2d_forward(x, out);
      REQUIRE(y.sizes() == IntList{n, c, oh, ow});
      const std::vector<double> yv = y.to_vector<double>();
      for (int64_t p = 0; p < n * c; ++p) {
        for (int64_t i = 0; i < oh; ++i) {
          for (int64_t j = 0; j < ow; ++j) {
            const auto y0 = static_cast<int64_t>(std::floor(double(i) * h / oh));
            const auto y1 = static_cast<int64_t>(std::ceil(double(i + 1) * h / oh));
            const auto x0 = static_cast<int64_t>(std::floor(double(j) * w / ow));
            const auto x1 = static_cast<int64_t>(std::ceil(double(j + 1) * w / ow));
            double s = 0;
            for (int64_t a = y0; a < y1; ++a)
              for (int64_t b = x0; b < x1; ++b) s += xv[p * h * w + a * w + b];
            CHECK(yv[(p * oh + i) * ow + j] ==
                  doctest::Approx(s / double((y1 - y0) * (x1 - x0))).epsilon(1e-5));
          }
        }
      }
      // The backward is the forward's transpose: <gy, A x> == <A^T gy, x>.
      Tensor gy = ls::randn(y.sizes(), ls::TensorOptions().dtype(dtype));
      Tensor gx = native::adaptive_avg_pool2d_backward(gy, x.sizes());
      REQUIRE(gx.sizes() == x.sizes());
      CHECK(dot(gy, y) == doctest::Approx(dot(gx, x)).epsilon(1e-4));
    }
  }
  // Overlapping windows, worked by hand: H = 5, oh = 3 -> rows [0, 2), [1, 4), [3, 5).
  Tensor col = ls::tensor(std::vector<double>{1, 2, 3, 4, 5}, {1, 1, 5, 1});
  Tensor y = native::adaptive_avg_pool2d_forward(col, {3, 1});
  CHECK(y.to_vector<double>() == std::vector<double>{1.5, 3.0, 4.5});
  Tensor gx =
      native::adaptive_avg_pool2d_backward(ls::ones({1, 1, 3, 1}, ls::kFloat64), {1, 1, 5, 1});
  const std::vector<double> expected{0.5, 0.5 + 1.0 / 3, 1.0 / 3, 1.0 / 3 + 0.5, 0.5};
  const std::vector<double> got = gx.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(expected[i]));
}

TEST_CASE("pool: errors name the op, the shapes and what to do") {
  Tensor x = ls::randn({1, 2, 3, 3});
  std::string m = error_of([&] {
    native::max_pool2d_forward(ls::randn({2, 3, 3}), {2}, {2}, {0});
  });
  CHECK(m.find("max_pool2d: expected a 4-d input (N, C, H, W) but got shape [2, 3, 3]") !=
        std::string::npos);
  m = error_of([&] { native::max_pool2d_forward(x, {5}, {1}, {0}); });
  CHECK(m.find("input 3x3 is too small for kernel 5x5 with padding 0") != std::string::npos);
  m = error_of([&] { native::max_pool2d_forward(x, {2}, {1}, {2}); });
  CHECK(m.find("at most half the kernel") != std::string::npos);
  m = error_of([&] { native::max_pool2d_forward(x, {2, 2, 2}, {1}, {0}); });
  CHECK(m.find("kernel_size must have 1 or 2 values") != std::string::npos);
  m = error_of([&] { native::adaptive_avg_pool2d_forward(x, {0, 2}); });
  CHECK(m.find("adaptive_avg_pool2d: output_size must be positive") != std::string::npos);
  m = error_of([&] { native::adaptive_avg_pool2d_forward(native::to_dtype(x, ls::kInt64), {1}); });
  CHECK(m.find("float32 or float64") != std::string::npos);
}

// Windows for the separable float32 path: odd sizes, padding, strides 1 to 3,
// kernels 1 to 5 and rectangular ones, output rows shorter and longer than a
// vector (16) and not a multiple of it, and ResNet50's stem pool.
const std::vector<std::pair<IntList, PoolCase>> kSeparableCases = {
    {{2, 3, 112, 112}, {{3}, {2}, {1}}},        // ResNet50's stem pool (smaller batch)
    {{1, 2, 9, 11}, {{3}, {2}, {1}}},           // odd sizes, padded
    {{1, 2, 10, 37}, {{3}, {1}, {1}}},          // stride 1, ow 37
    {{1, 2, 13, 70}, {{2}, {2}, {1}}},          // kernel 2 padded, ow 36
    {{1, 2, 12, 15}, {{3}, {2}, {0}}},          // overlapping, unpadded
    {{1, 3, 7, 33}, {{2}, {1}, {0}}},           // kernel 2 stride 1
    {{1, 2, 17, 50}, {{5}, {3}, {2}}},          // stride 3 (portable row pass)
    {{1, 2, 8, 9}, {{3, 2}, {1, 1}, {1, 1}}},   // rectangular kernel, stride 1
    {{1, 2, 9, 40}, {{2, 3}, {1, 2}, {1, 0}}},  // kh != kw, sh != sw
    {{1, 2, 6, 5}, {{1}, {1}, {0}}},            // kernel 1
    {{1, 1, 3, 3}, {{3}, {2}, {1}}},            // one output row of two
};

TEST_CASE("pool: separable float32 max_pool2d matches the definition with and without AVX-512") {
  // Note [Separable max-pool]: every combination of the AVX-512 kernels and the
  // portable loops, with plain and streamed outputs, on tie-heavy inputs with
  // NaNs and -inf, on all -inf rows, and on inputs without NaN or inf (where the
  // AVX-512 kernels drop their NaN compare).
  ls::manual_seed(11);
  for (const auto& [sizes, pc] : kSeparableCases) {
    for (int input_kind = 0; input_kind < 3; ++input_kind) {
      CAPTURE(ls::shape_str(sizes));
      CAPTURE(ls::shape_str(pc.kernel));
      CAPTURE(ls::shape_str(pc.stride));
      CAPTURE(input_kind);
      const double nan_rate = input_kind == 0 ? 0.02 : 0.0, inf_rate = input_kind == 0 ? 0.05 : 0.0;
      Tensor x = native::to_dtype(tie_heavy_input(sizes, nan_rate, inf_rate), ls::kFloat32);
      if (input_kind == 2) x = ls::randn(sizes);  // no ties, no specials
      const native::rules::PoolWindow win =
          native::rules::max_pool2d_window(x, pc.kernel, pc.stride, pc.padding, "test");
      REQUIRE(native::detail::separable_max_pool_applies(win));
      const int64_t planes = sizes[0] * sizes[1];
      const std::vector<float> xv = x.to_vector<float>();
      std::vector<float> want_values;
      std::vector<int64_t> want_indices;
      reference_max_pool(xv, planes, win, want_values, want_indices);
      for (int mode = 0; mode < 8; ++mode) {
        CAPTURE(mode);
        native::detail::SeparableMaxPoolOptions options;
        options.use_avx512 = (mode & 1) != 0;
        options.stream_values = (mode & 2) != 0;
        options.stream_indices = (mode & 4) != 0;
        std::vector<float> values(want_values.size(), 12345.0f);
        std::vector<int64_t> indices(want_indices.size(), -7);
        // Two calls over halves of the planes, as parallel chunks would run.
        const int64_t half = planes / 2;
        native::detail::separable_max_pool_planes(xv.data(), win, values.data(), indices.data(), 0,
                                                  half, options);
        native::detail::separable_max_pool_planes(xv.data(), win, values.data(), indices.data(),
                                                  half, planes, options);
        CHECK(count_value_mismatches(values, want_values) == 0);
        CHECK(indices == want_indices);
      }
    }
  }
  // Every value -inf: each index is its window's first in-plane position.
  Tensor all_neg_inf = ls::full({1, 1, 9, 21}, -std::numeric_limits<double>::infinity());
  check_max_pool(native::to_dtype(all_neg_inf, ls::kFloat32), {{3}, {2}, {1}});
  // An empty plane (H = 0 with padding 1) has windows without elements, which
  // the separable passes do not handle: it must stay on the per-window code.
  Tensor empty_rows = ls::randn({1, 2, 0, 5});
  CHECK_FALSE(native::detail::separable_max_pool_applies(
      native::rules::max_pool2d_window(empty_rows, {2}, {2}, {1}, "test")));
  auto [y_empty, i_empty] = native::max_pool2d_forward(empty_rows, {2}, {2}, {1});
  CHECK(y_empty.sizes() == IntList{1, 2, 1, 3});
}

TEST_CASE("pool: float32 max_pool2d gives the float64 per-window path's results") {
  // The float32 op takes the separable path for these windows (not side by
  // side), the float64 op the per-window code of pool.cpp; on the same values
  // (exact in both) they must pick the same elements. Also through the full
  // check (definition and backward) at 1 and 2 threads.
  ls::manual_seed(12);
  const int saved_threads = ls::get_num_threads();
  for (int threads : {1, 2}) {
    ls::set_num_threads(threads);
    for (const auto& [sizes, pc] : kSeparableCases) {
      CAPTURE(threads);
      CAPTURE(ls::shape_str(sizes));
      CAPTURE(ls::shape_str(pc.kernel));
      Tensor x64 = tie_heavy_input(sizes, 0.01, 0.03);
      Tensor x32 = native::to_dtype(x64, ls::kFloat32);
      auto [y32, i32] = native::max_pool2d_forward(x32, pc.kernel, pc.stride, pc.padding);
      auto [y64, i64] = native::max_pool2d_forward(x64, pc.kernel, pc.stride, pc.padding);
      CHECK(i32.to_vector<int64_t>() == i64.to_vector<int64_t>());
      CHECK(count_value_mismatches(y32.to_vector<float>(),
                                   native::to_dtype(y64, ls::kFloat32).to_vector<float>()) == 0);
      check_max_pool(x32, pc);
    }
  }
  ls::set_num_threads(saved_threads);
}

TEST_CASE("pool: max_pool2d backward scatter is the same with and without streaming") {
  // Each plane's gradient is the sum, in output order, of the grad_output
  // elements whose index points there; with streaming it is summed in a scratch
  // buffer first. Compared bit for bit with a plain loop, on indices from a
  // tie-heavy forward (many outputs share a position) and odd plane sizes.
  ls::manual_seed(13);
  for (const auto& [sizes, pc] : kSeparableCases) {
    CAPTURE(ls::shape_str(sizes));
    CAPTURE(ls::shape_str(pc.kernel));
    Tensor x = native::to_dtype(tie_heavy_input(sizes, 0.0, 0.0), ls::kFloat32);
    auto [y, idx] = native::max_pool2d_forward(x, pc.kernel, pc.stride, pc.padding);
    Tensor gy = ls::randn(y.sizes());
    const std::vector<float> gyv = gy.to_vector<float>();
    const std::vector<int64_t> iv = idx.to_vector<int64_t>();
    const int64_t planes = sizes[0] * sizes[1], hw = sizes[2] * sizes[3];
    const int64_t ohw = y.size(2) * y.size(3);
    std::vector<float> want(static_cast<size_t>(planes * hw), 0.0f);
    for (int64_t plane = 0; plane < planes; ++plane) {
      for (int64_t i = plane * ohw; i < (plane + 1) * ohw; ++i) {
        const auto at = static_cast<size_t>(plane * hw + iv[static_cast<size_t>(i)]);
        want[at] += gyv[static_cast<size_t>(i)];
      }
    }
    for (bool streaming : {false, true}) {
      CAPTURE(streaming);
      std::vector<float> got(want.size(), 99.0f);  // every element must be written
      native::detail::max_pool_scatter_planes(gyv.data(), iv.data(), got.data(), hw, ohw, 0,
                                              planes, streaming);
      CHECK(count_value_mismatches(got, want) == 0);
    }
    Tensor gx = native::max_pool2d_backward(gy, idx, x.sizes());
    CHECK(count_value_mismatches(gx.to_vector<float>(), want) == 0);
  }
}

TEST_CASE("pool: bfloat16 max_pool2d is the float32 op on the widened image, rounded once") {
  // Note [bfloat16 pooling]: values and indices equal the float32 forward's
  // exactly (a max is one of the inputs); the backward equals the float32
  // backward of the widened gradient, rounded once. Side-by-side windows (2x2
  // stride 2, the small CNN's) and the separable ones, with ties, NaN and -inf.
  ls::manual_seed(14);
  std::vector<std::pair<IntList, PoolCase>> cases = kSeparableCases;
  cases.push_back({{3, 4, 28, 28}, {{2}, {2}, {0}}});  // the small CNN's first pool
  cases.push_back({{2, 3, 7, 9}, {{2}, {2}, {0}}});    // odd width: the last column unused
  cases.push_back({{1, 2, 6, 70}, {{2}, {2}, {0}}});   // 35 outputs a row: 16 + 16 + 3
  const int saved_threads = ls::get_num_threads();
  for (int threads : {1, 2}) {
    ls::set_num_threads(threads);
    for (const auto& [sizes, pc] : cases) {
      CAPTURE(threads);
      CAPTURE(ls::shape_str(sizes));
      CAPTURE(ls::shape_str(pc.kernel));
      Tensor x16 = native::to_dtype(tie_heavy_input(sizes, 0.01, 0.03), ls::kBFloat16);
      Tensor x32 = native::to_dtype(x16, ls::kFloat32);
      auto [y16, i16] = native::max_pool2d_forward(x16, pc.kernel, pc.stride, pc.padding);
      auto [y32, i32] = native::max_pool2d_forward(x32, pc.kernel, pc.stride, pc.padding);
      REQUIRE(y16.dtype() == ls::kBFloat16);
      CHECK(i16.to_vector<int64_t>() == i32.to_vector<int64_t>());
      CHECK(count_value_mismatches(native::to_dtype(y16, ls::kFloat32).to_vector<float>(),
                                   y32.to_vector<float>()) == 0);
      // And float32 (for 2x2 stride 2 the AVX-512 kernel, Note [2x2 max-pool]) against
      // the definition and against float64's per-window loops.
      check_max_pool(x32, pc);
      auto [y64, i64] = native::max_pool2d_forward(native::to_dtype(x32, ls::kFloat64), pc.kernel,
                                                   pc.stride, pc.padding);
      CHECK(i64.to_vector<int64_t>() == i32.to_vector<int64_t>());
      Tensor gy16 = native::to_dtype(ls::randn(y16.sizes()), ls::kBFloat16);
      Tensor gx16 = native::max_pool2d_backward(gy16, i16, x16.sizes());
      REQUIRE(gx16.dtype() == ls::kBFloat16);
      Tensor want = native::to_dtype(
          native::max_pool2d_backward(native::to_dtype(gy16, ls::kFloat32), i32, x32.sizes()),
          ls::kBFloat16);
      CHECK(count_value_mismatches(native::to_dtype(gx16, ls::kFloat32).to_vector<float>(),
                                   native::to_dtype(want, ls::kFloat32).to_vector<float>()) == 0);
    }
  }
  ls::set_num_threads(saved_threads);
}
