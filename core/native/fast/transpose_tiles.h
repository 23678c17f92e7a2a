// core/native/fast/transpose_tiles.h — a matrix transpose of 2- and 4-byte elements in
// AVX-512 (or AVX2) registers, for copy_'s Transposed loop (Note [Copy loops]).
//
// copy_transposed walks 32 x 32 tiles element by element, which GCC 12 keeps
// scalar; for a copy that only moves bytes (same dtype on both sides) of 4-byte
// elements (float32, int32) or 2-byte ones (bf16, float16) this file moves
// whole 16 x 16 tiles through registers instead. See Note [Transposing in
// registers] in the .cpp.
//
// Read before: core/native/copy_kernels.h. Read next: core/native/copy_kernels.cpp.
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/native/fast/bf16_lanes.h"

namespace lockstep::native::detail {

// d[i * ldd + j] = s[i + j * lds] for i < rows, j < cols, elements of
// `elem_size` bytes. Returns false, having done nothing, when this build has no
// such kernel (neither AVX-512 nor AVX2, or elem_size not 2 or 4): the caller
// copies itself.
bool transpose_block(const void* s, int64_t lds, void* d, int64_t ldd, int64_t rows, int64_t cols,
                     int64_t elem_size);

// The same with the AVX2 kernels (8 x 8 tiles) whatever else the CPU has; false
// without AVX2. transpose_block takes them where AVX-512 is missing; tests call
// them directly so that an AVX-512 machine checks them too.
bool transpose_block_avx2(const void* s, int64_t lds, void* d, int64_t ldd, int64_t rows,
                          int64_t cols, int64_t elem_size);

// d[i * ldd + j] = s[i + j * lds] converted, bf16 to float (exactly) or float to
// bf16 (rounded as BFloat16::round_bits), in one pass with the AVX2 kernels;
// false, having done nothing, without AVX2.
bool transpose_widen_bf16(const BFloat16* s, int64_t lds, float* d, int64_t ldd, int64_t rows,
                          int64_t cols);
bool transpose_round_bf16(const float* s, int64_t lds, BFloat16* d, int64_t ldd, int64_t rows,
                          int64_t cols);

#if LOCKSTEP_BF16_LANES_AVX2  // AVX2 and FMA (fast/bf16_lanes.h)
// r[0..8) rows of 8 32-bit lanes -> r[e] = column e of the input (float shuffles
// move the bits unchanged).
inline void transpose_8x8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int p = 0; p < 4; ++p) {  // 32-bit interleave of row pairs
    t[2 * p] = _mm256_unpacklo_ps(r[2 * p], r[2 * p + 1]);
    t[2 * p + 1] = _mm256_unpackhi_ps(r[2 * p], r[2 * p + 1]);
  }
  for (int q = 0; q < 2; ++q) {  // 64-bit interleave: u[4q + e] lane L (of 4) = column 4L + e
    u[4 * q] = _mm256_shuffle_ps(t[4 * q], t[4 * q + 2], 0x44);
    u[4 * q + 1] = _mm256_shuffle_ps(t[4 * q], t[4 * q + 2], 0xEE);
    u[4 * q + 2] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
    u[4 * q + 3] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xEE);
  }
  for (int e = 0; e < 4; ++e) {  // each column's two 128-bit halves
    r[e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x20);
    r[4 + e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x31);
  }
}
#endif

// Whether transpose_block has a kernel for `elem_size`-byte elements in this build.
bool transpose_block_available(int64_t elem_size);

}  // namespace lockstep::native::detail
