// core/native/fast/conv_bf16_direct_loops.h — the inner loops of the bf16 direct convolutions.
//
// Shared by the forward (conv_bf16_direct.cpp) and the backward
// (conv_bf16_direct_backward.cpp) of the first-layer convolutions over one to
// three input channels: the zero-padded image as one flat buffer, the wide-row
// tap sums and dot products in 16-lane vectors (Note [bf16 direct convolution
// for few input channels]), their bf16 pair form (Note [bf16 direct weight
// gradient in pairs]), and the copies between wide and dense planes. Internal
// to those two files.
// Read before: core/native/fast/conv_bf16_direct.cpp. Read next: core/native/fast/conv_bf16_direct_backward.cpp.
#pragma once

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>
#if defined(__AVX512BF16__) || defined(__AVX512BW__)
#include <immintrin.h>
#endif

#include "core/native/bf16_rows.h"
#include "core/native/conv_bf16.h"
#include "core/native/native.h"
#include "core/parallel.h"

namespace lockstep::native::direct_loops {

constexpr int64_t kMaxTaps = 27;  // 3 x 3 over RGB
constexpr int64_t kTapGroup = 4;  // weight-gradient taps summed in one pass over the gradient

// A contiguous (N, C, H, W) bf16 or float32 tensor as `out_dtype` (float32, or
// bf16 from a bf16 tensor) with pad_h / pad_w zero rows and columns on each
// side, as a flat buffer of N C (H + 2 pad_h)(W + 2 pad_w) values and `slack`
// zeros after them (the wide loops below read a little past the last plane).
inline Tensor padded(const Tensor& t, int64_t pad_h, int64_t pad_w, int64_t slack,
              ScalarType out_dtype = kFloat32) {
  const int64_t n = t.size(0), c = t.size(1), h = t.size(2), w = t.size(3);
  const int64_t hp = h + 2 * pad_h, wp = w + 2 * pad_w;
  Tensor out = zeros({n * c * hp * wp + slack}, out_dtype);
  const bool bf16 = t.dtype() == kBFloat16;
  const BFloat16* s16 = bf16 ? t.data_ptr<BFloat16>() : nullptr;
  const float* s32 = bf16 ? nullptr : t.data_ptr<float>();
  float* o32 = out_dtype == kFloat32 ? out.data_ptr<float>() : nullptr;
  BFloat16* o16 = out_dtype == kFloat32 ? nullptr : out.data_ptr<BFloat16>();
  parallel_for(0, n * c, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t plane = lo; plane < hi; ++plane) {
      for (int64_t y = 0; y < h; ++y) {
        const int64_t row = (plane * hp + y + pad_h) * wp + pad_w, at = (plane * h + y) * w;
        if (o16 != nullptr) {
          std::copy_n(s16 + at, w, o16 + row);
        } else if (bf16) {
          widen_bf16(s16 + at, o32 + row, w);
        } else {
          std::copy_n(s32 + at, w, o32 + row);
        }
      }
    }
  });
  return out;
}

// The wide form: an output plane (rows, cols) of a stride-1 correlation over a
// padded plane `width` wide is computed at width columns per row, the last
// width - cols of them junk that is never read out, so each tap is one
// contiguous run of len = rows * width values instead of `rows` short rows (a
// 28-wide row is one vector and a scalar tail of 12).

// GCC notes (-Wpsabi) that a 64-byte vector passed or returned by value goes
// differently with and without AVX-512; the functions below are inline, compiled
// with the flags of the file that includes them, never called across files.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

// 16 float32 lanes (GCC / Clang vector extension: one AVX-512 register here, two
// or four narrower ones elsewhere), loaded and stored unaligned.
using Vec = float __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;
constexpr int64_t kVecs = 8;                // registers of a block
constexpr int64_t kBlock = kVecs * kLanes;  // the wide planes are whole blocks long
inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, const Vec& v) { std::memcpy(p, &v, sizeof v); }

// acc[q] = init + sum_t v[t] src[off[t] + q] for q < len (a multiple of kBlock),
// taps in order; each block of kBlock outputs stays in kVecs registers across
// the taps (eight independent FMA chains: enough to cover the FMA latency).
inline void sum_taps(float* __restrict acc, const float* __restrict src, const int64_t* off,
                     const float* v, int64_t taps, float init, int64_t len) {
  for (int64_t q = 0; q < len; q += kBlock) {
    Vec a[kVecs];
#pragma GCC unroll 8
    for (int64_t k = 0; k < kVecs; ++k) a[k] = Vec{} + init;
    for (int64_t t = 0; t < taps; ++t) {
      const float* s = src + off[t] + q;
      const Vec w = Vec{} + v[t];
#pragma GCC unroll 8
      for (int64_t k = 0; k < kVecs; ++k) a[k] += w * load(s + k * kLanes);
    }
#pragma GCC unroll 8
    for (int64_t k = 0; k < kVecs; ++k) store(acc + q + k * kLanes, a[k]);
  }
}

// For the kTaps taps t < kTaps: out[t] = sum_q a[q] src[off[t] + q] over q < len
// (a multiple of kBlock), as kLanes partial sums (lane k sums the q = k mod
// kLanes). The taps share each load of `a`.
template <int kTaps>
void dot_taps(const float* __restrict a, const float* __restrict src, const int64_t* off,
              int64_t len, Vec* out) {
  Vec p[kTaps][2] = {};
  for (int64_t q = 0; q < len; q += 2 * kLanes) {
    const Vec a0 = load(a + q), a1 = load(a + q + kLanes);
#pragma GCC unroll 4
    for (int t = 0; t < kTaps; ++t) {
      p[t][0] += a0 * load(src + off[t] + q);
      p[t][1] += a1 * load(src + off[t] + q + kLanes);
    }
  }
  for (int t = 0; t < kTaps; ++t) out[t] = p[t][0] + p[t][1];
}

#if defined(__AVX512BF16__)
// dot_taps on bf16 planes (Note [bf16 direct weight gradient in pairs]): the
// same sums, two products at a time per lane by vdpbf16ps, each product exact
// in float32. len is a multiple of 64.
template <int kTaps>
void dot_taps(const BFloat16* __restrict a, const BFloat16* __restrict src, const int64_t* off,
              int64_t len, Vec* out) {
  __m512 p[kTaps][2];
  for (int t = 0; t < kTaps; ++t) p[t][0] = p[t][1] = _mm512_setzero_ps();
  for (int64_t q = 0; q < len; q += 64) {
    const auto a0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(a + q));
    const auto a1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(a + q + 32));
#pragma GCC unroll 4
    for (int t = 0; t < kTaps; ++t) {
      const BFloat16* s = src + off[t] + q;
      p[t][0] = _mm512_dpbf16_ps(p[t][0], a0, reinterpret_cast<__m512bh>(_mm512_loadu_si512(s)));
      p[t][1] =
          _mm512_dpbf16_ps(p[t][1], a1, reinterpret_cast<__m512bh>(_mm512_loadu_si512(s + 32)));
    }
  }
  for (int t = 0; t < kTaps; ++t) {
    const __m512 sum = _mm512_add_ps(p[t][0], p[t][1]);
    std::memcpy(&out[t], &sum, sizeof sum);
  }
}
// The planes of the weight gradient: bf16 where vdpbf16ps exists.
using WgradPlane = BFloat16;
#else
using WgradPlane = float;
#endif

// A bf16 gradient row into a wide plane of float32 (widened) or bf16 (copied).
inline void place_row(const BFloat16* src, float* dst, int64_t m) { widen_bf16(src, dst, m); }
inline void place_row(const BFloat16* src, BFloat16* dst, int64_t m) {
#if defined(__AVX512BW__)
  for (int64_t j = 0; j < m; j += 32) {  // masked: a 28-wide row is one step, no memmove call
    const __mmask32 k = m - j >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << (m - j)) - 1u);
    _mm512_mask_storeu_epi16(dst + j, k, _mm512_maskz_loadu_epi16(k, src + j));
  }
#else
  std::copy_n(src, m, dst);
#endif
}

// rows x cols of a wide plane (rows `width` apart) into a dense bf16 or float32
// plane, row by row (bf16: each row rounded straight into place, one full and
// one masked AVX-512 step for a 28-wide row, Note [bfloat16 rows in AVX-512]).
template <class T>
void write_dense(const float* wide, int64_t rows, int64_t cols, int64_t width, T* out) {
  for (int64_t r = 0; r < rows; ++r) {
    if constexpr (std::is_same_v<T, BFloat16>) {
      round_to_bf16(wide + r * width, out + r * cols, cols);
    } else {
      std::copy_n(wide + r * width, cols, out + r * cols);
    }
  }
}

// Where tap (c, i, j) of an image's window starts, from its padded image
// (C_in planes of hp x wp): plane c, row i, column j.
inline std::vector<int64_t> tap_offsets(const ConvGeometry& g, int64_t hp, int64_t wp) {
  std::vector<int64_t> off(g.c_in * g.kh * g.kw);
  for (int64_t t = 0; t < static_cast<int64_t>(off.size()); ++t) {
    off[t] = ((t / (g.kh * g.kw)) * hp + (t / g.kw) % g.kh) * wp + t % g.kw;
  }
  return off;
}

#pragma GCC diagnostic pop  // -Wpsabi, above

}  // namespace lockstep::native::direct_loops
