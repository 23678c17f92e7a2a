// core/native/gemm_bf16_via_float32.cpp — the bfloat16 GEMM on a CPU where oneDNN
// has no bf16 kernels: widen the operands, multiply in float32, round once.
//
// § Note [bf16 without oneDNN kernels]
// oneDNN 2.6 (Debian 12's) builds bf16 matmuls and convolutions only on AVX-512
// CPUs; on an AVX2 machine (an AMD Zen 3, older Xeons) creating one fails with
// "could not create a primitive descriptor". onednn_detail::has_bf16() finds out
// once, by building one small bf16 matmul, and where it is false every bf16 GEMM
// and convolution takes a float32 path instead:
//   - GEMM (choose_gemm: bf16_via_float32, this file): with AVX2 + FMA, a blocked
//     float32 GEMM whose packing widens the operands (Note [bf16 GEMM in AVX2
//     registers], fast/gemm_bf16_avx2.cpp); without, A and B widened into dense
//     float32 copies, float32 GEMM (dnnl_sgemm, which runs on any x86-64), the
//     bias and beta * C added in float32, C rounded once when it is bf16;
//   - convolution (choose_conv_bf16: bf16_via_float32, conv_bf16.cpp): the float32
//     rules of choose_conv on widened tensors, the result rounded once.
// The values are those of a bf16 matmul with float32 accumulation (what oneDNN's
// AVX-512 and AMX kernels compute), up to the order of the float32 sums, so
// autocast trains the same on every CPU; it costs the widening copies and runs at
// float32's speed. LOCKSTEP_ONEDNN_BF16=0 takes these paths on any CPU, which is
// how the tests check them against the reference loops on an AVX-512 machine.
//
// Read before: core/native/gemm_bf16.h, core/native/gemm_bf16.cpp.
// Read next: core/native/fast/gemm_bf16_avx2.h.
#include <algorithm>
#include <type_traits>

#include "core/factory.h"
#include "core/native/bf16_rows.h"
#include "core/native/fast/gemm_bf16_avx2.h"
#include "core/native/gemm.h"
#include "core/native/gemm_bf16.h"
#include "core/parallel.h"

namespace lockstep::native {

namespace {

// dst (rows, cols), dense, = src (rows, cols) read with leading dimension ld, widened.
// The copies are tensors from the caching allocator, not zero-filled vectors: a
// std::vector would write every value twice, and its fresh pages cost the kernel
// a third pass to clear them on each call.
Tensor widen_matrix(const BFloat16* src, int64_t rows, int64_t cols, int64_t ld) {
  Tensor dst = empty({rows, cols}, kFloat32);  // (rows, cols)
  float* d = dst.data_ptr<float>();
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t r = lo; r < hi; ++r) widen_bf16(src + r * ld, d + r * cols, cols);
               });
  return dst;
}

}  // namespace

template <class Out>
void gemm_bf16_via_float32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                           const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb,
                           float beta, Out* c, int64_t ldc, const BFloat16* bias) {
  if (m == 0 || n == 0) return;
  if (detail::gemm_bf16_avx2(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc, bias)) return;
  // A as stored: (m, k), or (k, m) when transposed; likewise B.
  const Tensor a32 = widen_matrix(a, trans_a ? k : m, trans_a ? m : k, lda);
  const Tensor b32 = widen_matrix(b, trans_b ? n : k, trans_b ? k : n, ldb);
  const int64_t lda32 = trans_a ? m : k, ldb32 = trans_b ? k : n;
  // C in float32: C itself when it is float, else a dense copy (widened when beta reads it).
  Tensor c_wide;  // (m, n) when C is bf16
  float* c32 = nullptr;
  int64_t ldc32 = ldc;
  if constexpr (std::is_same_v<Out, float>) {
    c32 = c;
  } else {
    // beta 0: the GEMM writes every value without reading it; else C widened first.
    c_wide = beta != 0.0f ? widen_matrix(c, m, n, ldc) : empty({m, n}, kFloat32);
    c32 = c_wide.data_ptr<float>();
    ldc32 = n;
  }
  gemm<float>(trans_a, trans_b, m, n, k, 1.0f, a32.data_ptr<float>(), lda32,
              b32.data_ptr<float>(), ldb32, beta, c32, ldc32);
  parallel_for(0, m, std::max<int64_t>(1, 16384 / n), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float* row = c32 + i * ldc32;
      if (bias != nullptr) {
        for (int64_t j = 0; j < n; ++j) row[j] += static_cast<float>(bias[j]);
      }
      if constexpr (!std::is_same_v<Out, float>) round_to_bf16(row, c + i * ldc, n);
    }
  });
}

template void gemm_bf16_via_float32<float>(bool, bool, int64_t, int64_t, int64_t,
                                           const BFloat16*, int64_t, const BFloat16*, int64_t,
                                           float, float*, int64_t, const BFloat16*);
template void gemm_bf16_via_float32<BFloat16>(bool, bool, int64_t, int64_t, int64_t,
                                              const BFloat16*, int64_t, const BFloat16*, int64_t,
                                              float, BFloat16*, int64_t, const BFloat16*);

}  // namespace lockstep::native
