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
// Read before: core/native/pool.cpp.
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
#include "core/parallel.h"
#include "core/rng.h"
#include "core/shape.h"

namespace ls = lockstep;
namespace native = lockstep::native;
using ls::IntList;
using ls::Tensor;

namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ls::Error& e) {
    return e.what();
  }
  return "no error";
}

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
