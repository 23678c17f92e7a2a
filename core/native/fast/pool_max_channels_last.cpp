// core/native/fast/pool_max_channels_last.cpp — max_pool2d on channels-last bfloat16 images.
//
// § Note [Channel-vector max-pool]
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
// § Note [Channel-vector max-pool in AVX-512]
// The loops above, in float32 buffers, are the reference. With AVX-512BW the
// forward runs 16 channels to a register: the window's first element starts the
// maximum (what the -infinity start takes first anyway), each later one is taken
// per lane by the same rule, and the raw bf16 bits and int64 indices move with
// the mask, so the output is the taken element's bits with no gather. When the
// windows tile the image (stride = kernel, no padding: the 2x2 pools of a small
// CNN) each input element lies in at most one window, so backward writes every
// gx element once — round(0 + gy) where the index points at it, +0 elsewhere,
// the very sum the scatter forms — with no float image buffer and no zero fill.
// Overlapping windows keep the scatter.
//
// Read before: core/native/fast/pool_max_channels_last.h.
#include "core/native/fast/pool_max_channels_last.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/native/bf16_rows.h"
#include "core/parallel.h"

namespace lockstep::native::detail {

namespace {

// One output pixel of a window [y0, y1) x [x0, x1) of image xi: y and idx at
// their pixel; b and v are c floats of scratch.
[[maybe_unused]] void max_window(const BFloat16* xi, int64_t w, int64_t c, int64_t y0, int64_t y1,
                                 int64_t x0, int64_t x1, BFloat16* y, int64_t* at, float* b,
                                 float* v) {
  const int64_t first = y0 * w + x0;
  std::fill(b, b + c, -std::numeric_limits<float>::infinity());
  std::fill(at, at + c, first);
  for (int64_t iy = y0; iy < y1; ++iy) {
    for (int64_t ix = x0; ix < x1; ++ix) {
      const int64_t pos = iy * w + ix;
      widen_bf16(xi + pos * c, v, c);
#pragma omp simd
      for (int64_t ch = 0; ch < c; ++ch) {
        const bool take = v[ch] > b[ch] || v[ch] != v[ch];  // NaN propagates
        b[ch] = take ? v[ch] : b[ch];
        at[ch] = take ? pos : at[ch];
      }
    }
  }
  for (int64_t ch = 0; ch < c; ++ch) y[ch] = xi[at[ch] * c + ch];
}

#if LOCKSTEP_BF16_ROWS_AVX512
using detail_bf16_rows::lanes;

inline __m512 widen_lanes(__m256i h) {
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(detail_bf16_rows::kAll,
                                                     _mm512_maskz_cvtepu16_epi32(detail_bf16_rows::kAll, h), 16));
}

// One output pixel of a window [y0, y1) x [x0, x1) of image xi: y and idx at `out`.
void max_window_avx512(const BFloat16* xi, int64_t w, int64_t c, int64_t y0, int64_t y1, int64_t x0,
                       int64_t x1, BFloat16* y, int64_t* idx) {
  const int64_t first = y0 * w + x0;
  for (int64_t ch = 0; ch < c; ch += 16) {
    const __mmask16 k = lanes(c - ch);
    __m256i raw = _mm256_maskz_loadu_epi16(k, xi + first * c + ch);
    __m512 best = widen_lanes(raw);
    __m512i at_lo = _mm512_set1_epi64(first), at_hi = at_lo;
    for (int64_t iy = y0; iy < y1; ++iy) {
      for (int64_t ix = iy == y0 ? x0 + 1 : x0; ix < x1; ++ix) {
        const int64_t pos = iy * w + ix;
        const __m256i r = _mm256_maskz_loadu_epi16(k, xi + pos * c + ch);
        const __m512 v = widen_lanes(r);
        const __mmask16 take = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
                               _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);  // NaN propagates
        best = _mm512_mask_mov_ps(best, take, v);
        raw = _mm256_mask_mov_epi16(raw, take, r);
        const __m512i at = _mm512_set1_epi64(pos);
        at_lo = _mm512_mask_mov_epi64(at_lo, static_cast<__mmask8>(take), at);
        at_hi = _mm512_mask_mov_epi64(at_hi, static_cast<__mmask8>(take >> 8), at);
      }
    }
    _mm256_mask_storeu_epi16(y + ch, k, raw);
    _mm512_mask_storeu_epi64(idx + ch, static_cast<__mmask8>(k), at_lo);
    _mm512_mask_storeu_epi64(idx + ch + 8, static_cast<__mmask8>(k >> 8), at_hi);
  }
}

// The gradient of one output pixel's tile, 16 channels at a time: gx at each
// input pixel of the tile is round(0 + gy) in the lanes whose index is that
// pixel, +0 in the others. False when some lane's index lies outside the tile.
bool tile_gradient_avx512(const BFloat16* gy, const int64_t* at, const rules::PoolWindow& p,
                          int64_t oy, int64_t ox, int64_t c, BFloat16* gxi) {
  for (int64_t ch = 0; ch < c; ch += 16) {
    const __mmask16 k = lanes(c - ch);
    const auto k_lo = static_cast<__mmask8>(k), k_hi = static_cast<__mmask8>(k >> 8);
    const __m512i at_lo = _mm512_maskz_loadu_epi64(k_lo, at + ch);
    const __m512i at_hi = _mm512_maskz_loadu_epi64(k_hi, at + ch + 8);
    const __m512 g = widen_lanes(_mm256_maskz_loadu_epi16(k, gy + ch));
    __mmask16 found = 0;
    for (int64_t iy = oy * p.kh; iy < (oy + 1) * p.kh; ++iy) {
      for (int64_t ix = ox * p.kw; ix < (ox + 1) * p.kw; ++ix) {
        const __m512i pos = _mm512_set1_epi64(iy * p.w + ix);
        const unsigned lo = _mm512_mask_cmpeq_epi64_mask(k_lo, at_lo, pos);
        const unsigned hi = _mm512_mask_cmpeq_epi64_mask(k_hi, at_hi, pos);
        const auto mine = static_cast<__mmask16>(lo | (hi << 8));
        found = static_cast<__mmask16>(found | mine);
        const __m512 sum = _mm512_maskz_add_ps(mine, _mm512_setzero_ps(), g);
        _mm512_mask_cvtepi32_storeu_epi16(gxi + (iy * p.w + ix) * c + ch, k,
                                          detail_bf16_rows::round_lanes(_mm512_castps_si512(sum)));
      }
    }
    if (found != k) return false;
  }
  return true;
}
#endif

// The error for an index outside its window when the windows tile the image.
std::string outside_window(const rules::PoolWindow& p) {
  return lockstep::detail::str(
      "max_pool2d_backward: an index lies outside its ", p.kh, "x", p.kw,
      " window, so these indices do not come from max_pool2d with kernel_size = stride = ", p.kh,
      "x", p.kw, " and no padding; pass the tile of the pool that made them (max_pool2d_tile), "
      "or none");
}

// Whether the windows tile the image: each input element in at most one window.
bool windows_tile(const rules::PoolWindow& p) {
  return p.kh > 0 && p.kw > 0 && p.sh == p.kh && p.sw == p.kw && p.ph == 0 && p.pw == 0;
}

}  // namespace

void max_pool_channels_last(const BFloat16* x, const rules::PoolWindow& p, int64_t n, int64_t c,
                            BFloat16* y, int64_t* idx) {
  parallel_for(0, n * p.oh, 1, [x, y, idx, p, c](int64_t lo, int64_t hi) {
    std::vector<float> best(static_cast<size_t>(c)), row(static_cast<size_t>(c));
    for (int64_t r = lo; r < hi; ++r) {  // r = image * oH + oy
      const int64_t img = r / p.oh, oy = r % p.oh;
      const int64_t y0 = std::max<int64_t>(oy * p.sh - p.ph, 0);
      const int64_t y1 = std::min<int64_t>(oy * p.sh - p.ph + p.kh, p.h);
      const BFloat16* xi = x + img * p.h * p.w * c;
      for (int64_t ox = 0; ox < p.ow; ++ox) {
        const int64_t x0 = std::max<int64_t>(ox * p.sw - p.pw, 0);
        const int64_t x1 = std::min<int64_t>(ox * p.sw - p.pw + p.kw, p.w);
        const int64_t out = (r * p.ow + ox) * c;
#if LOCKSTEP_BF16_ROWS_AVX512
        max_window_avx512(xi, p.w, c, y0, y1, x0, x1, y + out, idx + out);
#else
        max_window(xi, p.w, c, y0, y1, x0, x1, y + out, idx + out, best.data(), row.data());
#endif
      }
    }
  });
}

void max_pool_channels_last_backward(const BFloat16* gy, const int64_t* idx,
                                     const rules::PoolWindow& p, int64_t n, int64_t c,
                                     BFloat16* gx) {
  const int64_t in_image = p.h * p.w * c, out_pixels = p.oh * p.ow;
#if LOCKSTEP_BF16_ROWS_AVX512
  if (windows_tile(p)) {  // Note [Channel-vector max-pool in AVX-512]
    std::atomic<bool> outside{false};
    parallel_for(0, n * p.oh, 1, [gy, idx, gx, p, c, &outside](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {  // r = image * oH + oy
        const int64_t img = r / p.oh, oy = r % p.oh;
        BFloat16* gxi = gx + img * p.h * p.w * c;
        for (int64_t ox = 0; ox < p.ow; ++ox) {
          const int64_t out = (r * p.ow + ox) * c;
          if (!tile_gradient_avx512(gy + out, idx + out, p, oy, ox, c, gxi)) outside = true;
        }
        // The elements right of every window in these rows, and below every window.
        const int64_t covered = p.ow * p.kw;
        for (int64_t iy = oy * p.kh; iy < (oy + 1) * p.kh; ++iy) {
          std::memset(static_cast<void*>(gxi + (iy * p.w + covered) * c), 0,
                      static_cast<size_t>((p.w - covered) * c) * sizeof(BFloat16));
        }
        if (oy + 1 == p.oh) {
          std::memset(static_cast<void*>(gxi + p.oh * p.kh * p.w * c), 0,
                      static_cast<size_t>((p.h - p.oh * p.kh) * p.w * c) * sizeof(BFloat16));
        }
      }
    });
    LS_CHECK(!outside, outside_window(p));
    return;
  }
#endif
  // The scatter, with every index checked: inside the image always, inside its own
  // window when the caller said the windows tile (as the AVX-512 path above finds).
  const bool tiled = windows_tile(p);
  std::atomic<int64_t> bad{-1};  // 0: outside the image, 1: outside its window
  parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> acc(static_cast<size_t>(in_image)), g(static_cast<size_t>(c));
    for (int64_t img = lo; img < hi; ++img) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      float* a = acc.data();
      for (int64_t q = 0; q < out_pixels; ++q) {
        const int64_t off = (img * out_pixels + q) * c;
        widen_bf16(gy + off, g.data(), c);
        const int64_t* at = idx + off;
        // Tiled: q's window starts at this pixel; an index i is inside it when
        // i - corner = r * W + col for some row r < kH and col < kW (no division per value).
        const int64_t corner = (q / p.ow) * p.kh * p.w + (q % p.ow) * p.kw;
        for (int64_t ch = 0; ch < c; ++ch) {
          const int64_t i = at[ch];
          if (i < 0 || i >= p.h * p.w) {
            bad = 0;
            continue;
          }
          if (tiled) {
            bool inside = false;
            for (int64_t r = 0; r < p.kh; ++r) {
              inside |= static_cast<uint64_t>(i - corner - r * p.w) < static_cast<uint64_t>(p.kw);
            }
            if (!inside) bad = 1;
          }
          a[i * c + ch] += g[ch];
        }
      }
      round_to_bf16(a, gx + img * in_image, in_image);
    }
  });
  LS_CHECK(bad != 0, "max_pool2d_backward: an index lies outside the ", p.h, "x", p.w,
           " image; pass the indices max_pool2d returned for this input");
  LS_CHECK(bad != 1, outside_window(p));
}

}  // namespace lockstep::native::detail
