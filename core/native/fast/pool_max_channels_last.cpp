// core/native/fast/pool_max_channels_last.cpp — max_pool2d on channels-last bfloat16 images.
//
// Note [Channel-vector max-pool]
// In channels-last order the C values of one pixel are contiguous, so a window is
// kH kW rows of C values and its maximum is an elementwise max over those rows:
// one vectorised loop over the channels per window element, with the
// definition's rule per lane (take v when v > best or v is NaN), and the index of
// the taken element kept beside it. The output is copied from the input at that
// index, so it is exact. Backward scatters: gx[idx] += gy, in float32, into one
// image's float buffer at a time (the windows overlap, so the sums need it), in
// output order (the order of the NCHW kernel's per-plane scatter), then rounds
// the image once. Images are independent, so threads take whole images.
//
// Read before: core/native/fast/pool_max_channels_last.h.
#include "core/native/fast/pool_max_channels_last.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "core/native/bf16_rows.h"
#include "core/parallel.h"

namespace lockstep::native::detail {

void max_pool_channels_last(const BFloat16* x, const rules::PoolWindow& p, int64_t n, int64_t c,
                            BFloat16* y, int64_t* idx) {
  parallel_for(0, n * p.oh, 1, [x, y, idx, p, c](int64_t lo, int64_t hi) {
    std::vector<float> best(static_cast<size_t>(c)), row(static_cast<size_t>(c));
    float* b = best.data();
    float* v = row.data();
    for (int64_t r = lo; r < hi; ++r) {  // r = image * oH + oy
      const int64_t img = r / p.oh, oy = r % p.oh;
      const int64_t y0 = std::max<int64_t>(oy * p.sh - p.ph, 0);
      const int64_t y1 = std::min<int64_t>(oy * p.sh - p.ph + p.kh, p.h);
      const BFloat16* xi = x + img * p.h * p.w * c;
      for (int64_t ox = 0; ox < p.ow; ++ox) {
        const int64_t x0 = std::max<int64_t>(ox * p.sw - p.pw, 0);
        const int64_t x1 = std::min<int64_t>(ox * p.sw - p.pw + p.kw, p.w);
        const int64_t out = (r * p.ow + ox) * c;
        int64_t* at = idx + out;
        const int64_t first = y0 * p.w + x0;
        std::fill(b, b + c, -std::numeric_limits<float>::infinity());
        std::fill(at, at + c, first);
        for (int64_t iy = y0; iy < y1; ++iy) {
          for (int64_t ix = x0; ix < x1; ++ix) {
            const int64_t pos = iy * p.w + ix;
            widen_bf16(xi + pos * c, v, c);
#pragma omp simd
            for (int64_t ch = 0; ch < c; ++ch) {
              const bool take = v[ch] > b[ch] || v[ch] != v[ch];  // NaN propagates
              b[ch] = take ? v[ch] : b[ch];
              at[ch] = take ? pos : at[ch];
            }
          }
        }
        for (int64_t ch = 0; ch < c; ++ch) y[out + ch] = xi[at[ch] * c + ch];
      }
    }
  });
}

void max_pool_channels_last_backward(const BFloat16* gy, const int64_t* idx,
                                     const rules::PoolWindow& p, int64_t n, int64_t c,
                                     BFloat16* gx) {
  const int64_t in_image = p.h * p.w * c, out_pixels = p.oh * p.ow;
  parallel_for(0, n, 1, [gy, idx, gx, c, in_image, out_pixels](int64_t lo, int64_t hi) {
    std::vector<float> acc(static_cast<size_t>(in_image)), g(static_cast<size_t>(c));
    for (int64_t img = lo; img < hi; ++img) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      float* a = acc.data();
      for (int64_t q = 0; q < out_pixels; ++q) {
        const int64_t off = (img * out_pixels + q) * c;
        widen_bf16(gy + off, g.data(), c);
        const int64_t* at = idx + off;
        for (int64_t ch = 0; ch < c; ++ch) a[at[ch] * c + ch] += g[ch];
      }
      round_to_bf16(a, gx + img * in_image, in_image);
    }
  });
}

}  // namespace lockstep::native::detail
