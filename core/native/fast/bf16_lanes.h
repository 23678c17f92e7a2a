// core/native/fast/bf16_lanes.h — the few vector operations of the bfloat16 row
// kernels (fast/batch_norm_bf16_nhwc.cpp), in three widths with the same bits:
// 16 float lanes in an AVX-512 register where bf16_rows.h has them, 8 in an AVX2
// register where the CPU has AVX2 and FMA (the Zen 3 and the Xeons without
// AVX-512), one float otherwise. `lanes` names the widest this build has.
//
// A row's ReLU mask can be kept as bits (Note [ReLU mask in bits] in
// autograd/functions/batch_norm.cpp): ceil(C / 16) 16-bit words a row, bit l of
// word w for value 16 w + l; store_bits / load_bits write and read them kLanes
// values at a time.
//
// § Note [Row lanes, same bits]
// Every width computes each value with the same operations in the same order
// (loads widen bf16 exactly, fma is fused in all three, stores round as
// BFloat16::round_bits, relu is std::max(v, 0.0f) with its NaN and -0), and a
// row's sums run along the rows, never across lanes: the kernels give the same
// bits at any width. tests/core/test_bf16_lanes.cpp checks each wider width this
// build has against the one-float lanes, operation by operation, on NaNs,
// infinities, subnormals, ties and every tail length.
//
// Read before: core/native/bf16_rows.h. Read next: core/native/fast/batch_norm_bf16_nhwc.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/native/bf16_rows.h"
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LOCKSTEP_BF16_LANES_AVX2 1
#endif

namespace lockstep::native {

// The 16-bit words of one row's mask of c values.
inline int64_t bit_words(int64_t c) { return (c + 15) / 16; }

// Row loops step through a row's C values kLanes at a time, the last step
// masked (K: which lanes are live), with these few operations.
namespace lanes_scalar {
using F = float;
using K = bool;
constexpr int64_t kLanes = 1;
inline K first(int64_t) { return true; }
inline F load(const BFloat16* p, K) { return static_cast<float>(*p); }
inline F load(const float* p, K) { return *p; }
inline void store(BFloat16* p, K, F v) { p->bits = BFloat16::round_bits(v); }
inline void store(float* p, K, F v) { *p = v; }
inline F fma(F a, F b, F c) { return std::fma(a, b, c); }
inline F add(F a, F b) { return a + b; }
inline F sub(F a, F b) { return a - b; }
inline F relu(F v) { return std::max(v, 0.0f); }
inline K positive(K k, F v) { return k && v > 0.0f; }
inline F keep(K k, F v) { return k ? v : 0.0f; }
inline F round_trip(F v) { return static_cast<float>(BFloat16(v)); }
// The bits of lanes j .. j + kLanes - 1 of a row's mask: word j / 16 of the
// row, bit j % 16 + l for lane l (a row's lanes are stored in order).
inline void store_bits(uint16_t* row, int64_t j, K live) {
  uint16_t& word = row[j / 16];
  if (j % 16 == 0) word = 0;
  word = static_cast<uint16_t>(word | (static_cast<unsigned>(live) << (j % 16)));
}
inline K load_bits(const uint16_t* row, int64_t j, K k) {
  return k && ((row[j / 16] >> (j % 16)) & 1u) != 0;
}
}  // namespace lanes_scalar

#if LOCKSTEP_BF16_LANES_AVX2
// Eight floats in a __m256; K bit l = lane l live. AVX2 has masked float loads
// and stores but none for 16-bit values: a bf16 tail goes through 8 values on
// the stack.
namespace lanes_avx2 {
using F = __m256;
using K = uint32_t;
constexpr int64_t kLanes = 8;
constexpr K kAll = 0xffu;
inline K first(int64_t n) { return n >= 8 ? kAll : (1u << n) - 1u; }
namespace detail {
inline __m256i lane_mask(K k) {  // all ones in the live lanes
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(static_cast<int>(k)), bit), bit);
}
// 8 floats' bits -> their BFloat16::round_bits, in the low 16 bits of each lane.
inline __m256i round_lanes(__m256i u) {
  const __m256i high = _mm256_srli_epi32(u, 16);
  const __m256i odd = _mm256_and_si256(high, _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i quiet_nan = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));  // both >= 0: signed is fine
  return _mm256_blendv_epi8(rounded, quiet_nan, nan);
}
inline __m128i narrow(__m256i r) {  // 8 lanes' low 16 bits, in order
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
}  // namespace detail
inline F load(const BFloat16* p, K k) {  // 0 in the lanes outside k
  __m128i h;
  if (k == kAll) {
    h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  } else {
    alignas(16) uint16_t tail[8] = {};
    for (int l = 0; l < 8; ++l) {
      if ((k >> l) & 1u) tail[l] = p[l].bits;
    }
    h = _mm_load_si128(reinterpret_cast<const __m128i*>(tail));
  }
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline F load(const float* p, K k) {
  return k == kAll ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, detail::lane_mask(k));
}
inline void store(BFloat16* p, K k, F v) {
  const __m128i h = detail::narrow(detail::round_lanes(_mm256_castps_si256(v)));
  if (k == kAll) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
    return;
  }
  alignas(16) uint16_t tail[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(tail), h);
  for (int l = 0; l < 8; ++l) {
    if ((k >> l) & 1u) p[l].bits = tail[l];
  }
}
inline void store(float* p, K k, F v) {
  if (k == kAll) {
    _mm256_storeu_ps(p, v);
  } else {
    _mm256_maskstore_ps(p, detail::lane_mask(k), v);
  }
}
inline F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
inline F add(F a, F b) { return _mm256_add_ps(a, b); }
inline F sub(F a, F b) { return _mm256_sub_ps(a, b); }
// std::max(v, 0.0f): vmaxps returns its second operand for a NaN or two zeros.
inline F relu(F v) { return _mm256_max_ps(_mm256_setzero_ps(), v); }
inline K positive(K k, F v) {  // k and v > 0
  return k & static_cast<K>(_mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ)));
}
inline F keep(K k, F v) { return _mm256_and_ps(v, _mm256_castsi256_ps(detail::lane_mask(k))); }
inline F round_trip(F v) {  // v rounded to bf16 and widened back: the value a store keeps
  return _mm256_castsi256_ps(_mm256_slli_epi32(detail::round_lanes(_mm256_castps_si256(v)), 16));
}
// j a multiple of 8: the low or the high byte of word j / 16 (lanes outside k
// are 0 bits; the low byte is stored first and clears the high one).
inline void store_bits(uint16_t* row, int64_t j, K live) {
  uint16_t& word = row[j / 16];
  word = j % 16 == 0 ? static_cast<uint16_t>(live) : static_cast<uint16_t>(word | (live << 8));
}
inline K load_bits(const uint16_t* row, int64_t j, K k) {
  return k & ((static_cast<K>(row[j / 16]) >> (j % 16)) & kAll);
}
}  // namespace lanes_avx2
#endif

#if LOCKSTEP_BF16_ROWS_AVX512
// Sixteen floats in a __m512 with AVX-512's own mask registers; loads widen bf16
// and stores round with bf16_rows.h's lanes.
namespace lanes_avx512 {
using F = __m512;
using K = __mmask16;
constexpr int64_t kLanes = 16;
inline K first(int64_t n) { return detail_bf16_rows::lanes(n); }
inline F load(const BFloat16* p, K k) {  // 0 in the lanes outside k
  const __m512i u = _mm512_maskz_cvtepu16_epi32(k, _mm256_maskz_loadu_epi16(k, p));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(k, u, 16));
}
inline F load(const float* p, K k) { return _mm512_maskz_loadu_ps(k, p); }
inline void store(BFloat16* p, K k, F v) {
  _mm512_mask_cvtepi32_storeu_epi16(p, k, detail_bf16_rows::round_lanes(_mm512_castps_si512(v)));
}
inline void store(float* p, K k, F v) { _mm512_mask_storeu_ps(p, k, v); }
inline F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
inline F add(F a, F b) { return _mm512_add_ps(a, b); }
inline F sub(F a, F b) { return _mm512_sub_ps(a, b); }
inline F relu(F v) {  // std::max(v, 0.0f), NaN and -0 included; maskz_: see bf16_rows.h
  return _mm512_maskz_max_ps(detail_bf16_rows::kAll, _mm512_setzero_ps(), v);
}
inline K positive(K k, F v) {  // k and v > 0
  return _mm512_mask_cmp_ps_mask(k, v, _mm512_setzero_ps(), _CMP_GT_OQ);
}
inline F keep(K k, F v) { return _mm512_maskz_mov_ps(k, v); }  // 0 outside k
inline F round_trip(F v) {  // v rounded to bf16 and widened back: the value a store keeps
  const __m512i r = detail_bf16_rows::round_lanes(_mm512_castps_si512(v));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(detail_bf16_rows::kAll, r, 16));
}
// j a multiple of 16: the row's word j / 16 (lanes outside k stored as 0).
inline void store_bits(uint16_t* row, int64_t j, K live) { row[j / 16] = live; }
inline K load_bits(const uint16_t* row, int64_t j, K k) { return static_cast<K>(k & row[j / 16]); }
}  // namespace lanes_avx512
namespace lanes = lanes_avx512;
#elif LOCKSTEP_BF16_LANES_AVX2
namespace lanes = lanes_avx2;
#else
namespace lanes = lanes_scalar;
#endif

}  // namespace lockstep::native
