// core/native/bf16_rows.h — widen a run of bfloat16 values to float32, and round
// a float32 run back, the two loops every "compute in float32, store bf16"
// kernel brackets its work with (Note [bfloat16 elementwise]).
//
// Both are select-only loops GCC vectorises (core/half.h says why they store
// round_bits into .bits instead of assigning a BFloat16).
//
// Read before: core/half.h. Read next: core/native/batch_norm_bf16.cpp, core/native/pool.cpp.
#pragma once

#include <cstdint>

#include "core/half.h"

namespace lockstep::native {

// dst[j] = float(src[j]) for j < m: exact.
inline void widen_bf16(const BFloat16* src, float* dst, int64_t m) {
#pragma omp simd
  for (int64_t j = 0; j < m; ++j) dst[j] = static_cast<float>(src[j]);
}

// dst[j] = src[j] rounded to nearest even bf16, for j < m.
inline void round_to_bf16(const float* src, BFloat16* dst, int64_t m) {
#pragma omp simd
  for (int64_t j = 0; j < m; ++j) dst[j].bits = BFloat16::round_bits(src[j]);
}

}  // namespace lockstep::native
