// core/native/bf16_rows.h — widen a run of bfloat16 values to float32, and round
// a float32 run back, the two loops every "compute in float32, store bf16"
// kernel brackets its work with (Note [bfloat16 elementwise]).
//
// § Note [bfloat16 rows in AVX-512]
// GCC 12 vectorises the scalar loops (the *_reference functions below) 256 bits
// wide on this CPU and spends ~10 instructions per 8 values on the rounding's
// select, so the round-trip was a large share of a memory-bound bf16 kernel such
// as the direct convolution (measured: docs/results/kernel_choices.md). With AVX-512BW the loops below do 16 values a step, and
// the last m % 16 with masked loads and stores (no scalar tail: a 28-wide row
// is one full and one masked step). The rounding is the integer form of
// BFloat16::round_bits, lane for lane, so both paths give the same bits for every
// input, NaN, infinities and subnormals included (tests/core/test_bf16_rows.cpp
// checks them against each other). The AVX-512-BF16 instruction vcvtneps2bf16 is not
// used: it flushes subnormal inputs to zero, which round_bits does not.
//
// Read before: core/half.h. Read next: core/native/batch_norm_bf16.cpp, core/native/pool.cpp.
#pragma once

#include <cstdint>

#include "core/half.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define LOCKSTEP_BF16_ROWS_AVX512 1
#endif

namespace lockstep::native {

// dst[j] = float(src[j]) for j < m: exact. The scalar form, which GCC vectorises.
inline void widen_bf16_reference(const BFloat16* src, float* dst, int64_t m) {
#pragma omp simd
  for (int64_t j = 0; j < m; ++j) dst[j] = static_cast<float>(src[j]);
}

// dst[j] = src[j] rounded to nearest even bf16 (NaN stays a quiet NaN), j < m.
inline void round_to_bf16_reference(const float* src, BFloat16* dst, int64_t m) {
#pragma omp simd
  for (int64_t j = 0; j < m; ++j) dst[j].bits = BFloat16::round_bits(src[j]);
}

#if LOCKSTEP_BF16_ROWS_AVX512
namespace detail_bf16_rows {
// Every lane. (The maskz_ forms of shifts and widenings: GCC 12 warns of
// uninitialised values inside the unmasked intrinsics.)
constexpr __mmask16 kAll = 0xffff;
// The first min(m, 16) lanes.
inline __mmask16 lanes(int64_t m) {
  return m >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << m) - 1u);
}
// 16 floats' bits -> their round_bits, in the low 16 bits of each lane.
inline __m512i round_lanes(__m512i u) {
  const __m512i high = _mm512_maskz_srli_epi32(kAll, u, 16);
  const __m512i odd = _mm512_and_si512(high, _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_maskz_srli_epi32(
      kAll, _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i quiet_nan = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_mov_epi32(rounded, nan, quiet_nan);
}
}  // namespace detail_bf16_rows
#endif

// dst[j] = float(src[j]) for j < m: exact.
inline void widen_bf16(const BFloat16* src, float* dst, int64_t m) {
#if LOCKSTEP_BF16_ROWS_AVX512
  for (int64_t j = 0; j < m; j += 16) {
    const __mmask16 k = detail_bf16_rows::lanes(m - j);
    const __m256i h = _mm256_maskz_loadu_epi16(k, src + j);
    const __m512i u = _mm512_maskz_slli_epi32(k, _mm512_maskz_cvtepu16_epi32(k, h), 16);
    _mm512_mask_storeu_ps(dst + j, k, _mm512_castsi512_ps(u));
  }
#else
  widen_bf16_reference(src, dst, m);
#endif
}

// dst[j] = src[j] rounded to nearest even bf16 (NaN stays a quiet NaN), j < m.
inline void round_to_bf16(const float* src, BFloat16* dst, int64_t m) {
#if LOCKSTEP_BF16_ROWS_AVX512
  for (int64_t j = 0; j < m; j += 16) {
    const __mmask16 k = detail_bf16_rows::lanes(m - j);
    const __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(k, src + j));
    _mm512_mask_cvtepi32_storeu_epi16(dst + j, k, detail_bf16_rows::round_lanes(u));
  }
#else
  round_to_bf16_reference(src, dst, m);
#endif
}

}  // namespace lockstep::native
