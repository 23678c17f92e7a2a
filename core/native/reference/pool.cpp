// core/native/reference/pool.cpp — max pooling and adaptive average pooling,
// one window at a time (Note [Plain reference kernels]).
// Read before: core/native/reference/normalization.cpp. Read next:
// core/native/reference/softmax.cpp.
#include <cmath>
#include <limits>
#include <vector>

#include "core/factory.h"
#include "core/native/reference/reference.h"

namespace lockstep::native::reference {

std::tuple<Tensor, Tensor> max_pool2d_forward(const Tensor& x, int64_t kh, int64_t kw, int64_t sh,
                                              int64_t sw, int64_t ph, int64_t pw) {
  const int64_t planes = x.size(0) * x.size(1), h = x.size(2), w = x.size(3);
  const int64_t oh = (h + 2 * ph - kh) / sh + 1, ow = (w + 2 * pw - kw) / sw + 1;
  const std::vector<double> xv = x.to_vector<double>();
  std::vector<double> y;
  std::vector<int64_t> indices;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        double best = -std::numeric_limits<double>::infinity();
        int64_t at = -1;
        for (int64_t r = i * sh - ph; r < i * sh - ph + kh; ++r)
          for (int64_t c = j * sw - pw; c < j * sw - pw + kw; ++c) {
            if (r < 0 || r >= h || c < 0 || c >= w) continue;  // padding: -inf
            const double v = xv[(p * h + r) * w + c];
            if (at < 0 || std::isnan(v) || (!std::isnan(best) && v > best))
              best = v, at = r * w + c;
          }
        y.push_back(best);
        indices.push_back(at);
      }
  return {tensor(y, {x.size(0), x.size(1), oh, ow}),
          tensor(indices, {x.size(0), x.size(1), oh, ow})};
}

Tensor max_pool2d_backward(const Tensor& gy, const Tensor& indices, int64_t h, int64_t w) {
  const int64_t planes = gy.size(0) * gy.size(1), per_plane = gy.size(2) * gy.size(3);
  const std::vector<double> gyv = gy.to_vector<double>();
  const std::vector<int64_t> at = indices.to_vector<int64_t>();
  std::vector<double> gx(static_cast<size_t>(planes * h * w), 0.0);
  for (int64_t e = 0; e < planes * per_plane; ++e) gx[e / per_plane * h * w + at[e]] += gyv[e];
  return tensor(gx, {gy.size(0), gy.size(1), h, w});
}

namespace {
// Window i of n over a length of `size`: [floor(i size / n), ceil((i + 1) size / n)).
int64_t window_begin(int64_t i, int64_t n, int64_t size) { return i * size / n; }
int64_t window_end(int64_t i, int64_t n, int64_t size) { return ((i + 1) * size + n - 1) / n; }

// Each window's mean (forward), or each output gradient spread evenly over its window
// (backward): the same visit of (plane, i, j, window pixel).
template <class F>
void for_each_window_pixel(int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow,
                           F&& visit) {
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        const int64_t r0 = window_begin(i, oh, h), r1 = window_end(i, oh, h);
        const int64_t c0 = window_begin(j, ow, w), c1 = window_end(j, ow, w);
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c)
            visit((p * oh + i) * ow + j, (p * h + r) * w + c,
                  static_cast<double>((r1 - r0) * (c1 - c0)));
      }
}

}  // namespace

Tensor adaptive_avg_pool2d_forward(const Tensor& x, int64_t oh, int64_t ow) {
  const std::vector<double> xv = x.to_vector<double>();
  std::vector<double> y(static_cast<size_t>(x.size(0) * x.size(1) * oh * ow), 0.0);
  for_each_window_pixel(x.size(0) * x.size(1), x.size(2), x.size(3), oh, ow,
                        [&](int64_t yi, int64_t xi, double count) { y[yi] += xv[xi] / count; });
  return tensor(y, {x.size(0), x.size(1), oh, ow});
}

Tensor adaptive_avg_pool2d_backward(const Tensor& gy, int64_t h, int64_t w) {
  const std::vector<double> gyv = gy.to_vector<double>();
  std::vector<double> gx(static_cast<size_t>(gy.size(0) * gy.size(1) * h * w), 0.0);
  for_each_window_pixel(gy.size(0) * gy.size(1), h, w, gy.size(2), gy.size(3),
                        [&](int64_t yi, int64_t xi, double count) { gx[xi] += gyv[yi] / count; });
  return tensor(gx, {gy.size(0), gy.size(1), h, w});
}

}  // namespace lockstep::native::reference
