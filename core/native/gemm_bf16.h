// core/native/gemm_bf16.h — matrix multiply of bfloat16 matrices with float32 accumulation.
//
//   C = op(A) * op(B) + bias + beta * C,   A, B and the bias bfloat16, C float32 or bfloat16,
//
// on row-major buffers with leading dimensions, exactly as gemm() in gemm.h
// (alpha is always 1). Every product is accumulated in float32 and rounded to
// C's type once, at the end, so a bfloat16 C differs from the float32 result by
// one rounding. This is the kernel behind linear, matmul and bmm on bfloat16
// tensors (Note [Autocast policy] in core/autocast.h).
//
// Two backends, chosen by gemm_backend() (gemm.h):
//   Reference  plain loops with a float32 sum, the definition;
//   Eigen / OneDNN  oneDNN's matmul primitive on bf16 memory descriptors, which
//              this CPU runs on its AMX tiles (brg:avx512_core_amx_bf16) and
//              older AVX-512 CPUs with avx512_core_bf16 or an emulation. One
//              primitive per shape (sizes, leading dims, transposes, C's type,
//              beta) is built on first use and cached for the process.
//
// Read before: core/native/gemm.h, core/half.h. Read next: core/native/linalg.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/half.h"

namespace lockstep::native {

// B is a weight whose values change only when `version` does (Note [bf16 weights
// packed once per step] in gemm_bf16.cpp): the oneDNN path reorders it once into
// the layout its kernel reads best and reuses that copy while `owner` is alive
// and B's pointer and `version` are unchanged. owner: anything whose lifetime is
// the weight's (the parameter's storage); version: its storage's version counter.
struct Bf16Weight {
  std::shared_ptr<const void> owner;
  uint64_t version = 0;
};

// Out is float or BFloat16.
// bias: null, or n values added to every row of the product (in the float32 sum,
// before the one rounding; linear's bias under autocast, oneDNN's bias argument).
// weight_b: null, or B described as a weight (packed once, reused).
template <class Out>
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const BFloat16* a,
               int64_t lda, const BFloat16* b, int64_t ldb, float beta, Out* c, int64_t ldc,
               const BFloat16* bias = nullptr, const Bf16Weight* weight_b = nullptr);

// The definition, in loops (tests compare the fast path with it).
template <class Out>
void gemm_bf16_reference(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                         const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb,
                         float beta, Out* c, int64_t ldc, const BFloat16* bias = nullptr);

// `batch` products of one shape at element offsets, as gemm_batched in gemm.h.
// The same product by float32 GEMM on widened copies (Note [bf16 without oneDNN
// kernels] in gemm_bf16_via_float32.cpp): where oneDNN has no bf16 kernels.
template <class Out>
void gemm_bf16_via_float32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                           const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb,
                           float beta, Out* c, int64_t ldc, const BFloat16* bias = nullptr);

template <class Out>
void gemm_bf16_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n,
                       int64_t k, const BFloat16* a, const int64_t* a_offsets, int64_t lda,
                       const BFloat16* b, const int64_t* b_offsets, int64_t ldb, float beta,
                       Out* c, const int64_t* c_offsets, int64_t ldc);

// § Note [bf16 batched matmul as one call]
// A batch of products described by strides, as matmul and bmm see their operands:
// for every index i = (i_0, ..., i_{r-1}) of `sizes` (row-major),
//   C[i] (m, n) = op(A[i]) op(B[i]),   A[i] = a + sum_d i_d a_strides[d] (likewise B),
// C dense: (sizes..., m, n) with ldc = n. A stride of 0 broadcasts that operand
// along the dim. The oneDNN path is ONE matmul call whose memory descriptors are
// (batch..., rows, cols) with these strides, its primitive built once per shape
// (core/native/gemm_bf16_batched.cpp); oneDNN then runs its AMX kernel
// (brg:avx512_core_amx_bf16) over the whole batch, where one call per product
// got its small-shape gemm:jit instead. That kernel reads batches of dense
// matrices only (each matrix row-major or transposed with no gap between rows,
// the batch dims contiguous over them, except stride-0 ones); anything else
// (the heads of a fused q/k/v projection) goes to gemm:jit at half the speed,
// so matmul copies such an operand into a dense batch first: see
// multiply_into in core/native/linalg.cpp.
struct Bf16Batch {
  std::vector<int64_t> sizes;      // the batch dims of C
  std::vector<int64_t> a_strides;  // A's element stride along each, 0 to broadcast
  std::vector<int64_t> b_strides;
};
template <class Out>
void gemm_bf16_strided_batched(const Bf16Batch& batch, bool trans_a, bool trans_b, int64_t m,
                               int64_t n, int64_t k, const BFloat16* a, int64_t lda,
                               const BFloat16* b, int64_t ldb, Out* c);
// Whether gemm_bf16_strided_batched reads a batch that is not dense at half speed
// (the oneDNN path: see above), so that matmul should copy such an operand into a
// dense batch first. False where the products run one by one (no oneDNN bf16
// kernels, the Reference backend): those read any leading dimension in place.
bool gemm_bf16_batched_wants_dense();
// The definition: gemm_bf16_reference once per product.
template <class Out>
void gemm_bf16_strided_batched_reference(const Bf16Batch& batch, bool trans_a, bool trans_b,
                                         int64_t m, int64_t n, int64_t k, const BFloat16* a,
                                         int64_t lda, const BFloat16* b, int64_t ldb, Out* c);

// Primitives the oneDNN path has built so far (tests: a repeated shape builds none),
// and those of the strided batches.
int64_t gemm_bf16_primitives_built();
int64_t gemm_bf16_batched_primitives_built();
// Weight reorders the packed path has run so far (tests: a weight is packed once
// per version).
int64_t gemm_bf16_weights_packed();

}  // namespace lockstep::native
