// core/native/fast/gemm_bf16_avx2.h — the bfloat16 GEMM of a CPU with AVX2 and FMA
// but no oneDNN bf16 kernels (the AMD Zen 3, Xeons without AVX-512): float32
// products in AVX2 registers, the operands widened while they are packed.
//
//   C = op(A) * op(B) + bias + beta * C,   as gemm_bf16 (core/native/gemm_bf16.h).
//
// gemm_bf16_via_float32 (Note [bf16 without oneDNN kernels]) calls it first; see
// Note [bf16 GEMM in AVX2 registers] in the .cpp for the blocking.
//
// Read before: core/native/gemm_bf16_via_float32.cpp.
// Read next: core/native/fast/gemm_bf16_avx2.cpp.
#pragma once

#include <cstdint>

#include "core/half.h"

namespace lockstep::native::detail {

// Arguments as gemm_bf16's (Out float or BFloat16). Returns false, having done
// nothing, when this build has no AVX2 + FMA kernel or LOCKSTEP_BF16_AVX2_GEMM=0
// turns it off (A/B runs; the caller then widens whole operands and calls sgemm).
template <class Out>
bool gemm_bf16_avx2(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta,
                    Out* c, int64_t ldc, const BFloat16* bias);

// Whether this build has the kernel (AVX2 and FMA at compile time).
bool gemm_bf16_avx2_available();

}  // namespace lockstep::native::detail
