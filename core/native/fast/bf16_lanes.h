// core/native/fast/bf16_lanes.h — the few vector operations of the bfloat16 row
// kernels (fast/batch_norm_bf16_nhwc.cpp): 16 float lanes in an AVX-512 register
// where core/native/bf16_rows.h has them, one float otherwise, with the same bits.
//
// A row's ReLU mask can be kept as bits (Note [ReLU mask in bits] in
// autograd/functions/batch_norm.cpp): ceil(C / 16) 16-bit words a row, bit l of
// word w for value 16 w + l; store_bits / load_bits write and read them kLanes
// values at a time.
//
// Read before: core/native/bf16_rows.h. Read next: core/native/fast/batch_norm_bf16_nhwc.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/native/bf16_rows.h"

namespace lockstep::native {

// The 16-bit words of one row's mask of c values.
inline int64_t bit_words(int64_t c) { return (c + 15) / 16; }

// Row loops step through a row's C values kLanes at a time, the last step
// masked, with these few operations: AVX-512 registers of 16 floats where
// bf16_rows.h has them (loads widen bf16 exactly, stores round as round_bits),
// else one float at a time — the same bits either way.
namespace lanes {
#if LOCKSTEP_BF16_ROWS_AVX512
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
// The bits of lanes j .. j + kLanes - 1 of a row's mask (j a multiple of kLanes):
// word j / 16 of the row, bit l for lane l (lanes outside k stored as 0).
inline void store_bits(uint16_t* row, int64_t j, K live) { row[j / 16] = live; }
inline K load_bits(const uint16_t* row, int64_t j, K k) { return static_cast<K>(k & row[j / 16]); }
#else
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
inline void store_bits(uint16_t* row, int64_t j, K live) {
  uint16_t& word = row[j / 16];
  if (j % 16 == 0) word = 0;  // the row's lanes are stored in order
  word = static_cast<uint16_t>(word | (static_cast<unsigned>(live) << (j % 16)));
}
inline K load_bits(const uint16_t* row, int64_t j, K k) {
  return k && ((row[j / 16] >> (j % 16)) & 1u) != 0;
}
#endif
}  // namespace lanes

}  // namespace lockstep::native
