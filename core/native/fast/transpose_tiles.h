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

// Whether transpose_block has a kernel for `elem_size`-byte elements in this build.
bool transpose_block_available(int64_t elem_size);

}  // namespace lockstep::native::detail
