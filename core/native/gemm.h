// core/native/gemm.h — general matrix multiply on raw row-major buffers.
//
//   C = alpha * op(A) * op(B) + beta * C,   op(X) = X or X^T,
//
// with C of shape (m, n), op(A) of shape (m, k) and op(B) of shape (k, n).
// Every matrix is row-major: element (i, j) of A lives at a[i * lda + j], so
// `lda` is the distance between rows and must be at least the stored width
// (k for A, or m when trans_a: then A is stored as its (k, m) transpose).
// As in BLAS, beta == 0 means C is written without being read (NaNs in C vanish).
//
// Three backends compute the same thing (see Note [GEMM backends] in gemm.cpp):
//   Reference  plain loops, the definition; every other backend is tested against it
//   Eigen      Eigen::Map over the caller's buffers (float and double)
//   OneDNN     dnnl_sgemm (float only; double falls back to Eigen)
// The default is the fastest one measured on this project's machine (gemm.cpp
// header). Threads follow ls::get_num_threads(); inside a parallel region
// (e.g. bmm's batch loop) each call runs on one thread.
//
// Read before: core/parallel.h. Read next: core/native/linalg.cpp (mm, bmm, matmul).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace lockstep::native {

enum class GemmBackend { Reference, Eigen, OneDNN };

// Process-wide choice used by gemm() and gemm_batched(); benchmarks and tests switch it.
void set_gemm_backend(GemmBackend backend);
GemmBackend gemm_backend();
const char* gemm_backend_name(GemmBackend backend);  // "reference", "eigen", "onednn"

// What one product runs (Note [Kernel dispatch] in dispatch_verbose.h): choose_gemm
// names it, gemm_with and gemm_bf16 (gemm_bf16.h) run it.
enum class GemmImpl {
  Nothing,        // m or n is 0: no C to write
  ScaleC,         // k == 0 or alpha == 0: C = beta * C, nothing to multiply
  Reference,      // gemm_reference's loops (the Reference backend)
  Eigen,          // Eigen::Map products (the Eigen backend, and double under OneDNN)
  OneDNN,         // dnnl_sgemm (float32 under the OneDNN backend)
  Bf16Reference,  // gemm_bf16_reference's loops (bfloat16: the Reference backend, or k == 0)
  Bf16OneDNN,     // oneDNN's bf16 matmul primitive
  Bf16ViaFloat32, // widened operands, float32 GEMM, rounded C (no oneDNN bf16 kernels here)
};
const char* gemm_impl_name(GemmImpl impl);  // "nothing", "scale_c", "reference", "eigen", ...
// The implementation of an (m, n, k) product of `dtype` (float32, float64 or
// bfloat16) under `backend`; alpha_zero: alpha == 0 (float32 and float64 only).
// Under LOCKSTEP_VERBOSE=dispatch prints the choice.
GemmImpl choose_gemm(GemmBackend backend, ScalarType dtype, bool trans_a, bool trans_b, int64_t m,
                     int64_t n, int64_t k, bool alpha_zero);

// C = alpha * op(A) * op(B) + beta * C with the current backend. T is float or double.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// The same product with one named backend (tests and benchmarks compare them).
template <class T>
void gemm_with(GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
               T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
               int64_t ldc);

// The definition, in plain loops: gemm_with(GemmBackend::Reference, ...).
template <class T>
void gemm_reference(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha,
                    const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// `batch` products of the same shape: product i reads a + a_offsets[i] and
// b + b_offsets[i] and writes c + c_offsets[i] (offsets in elements; several
// products may read the same A or B, as broadcast batch dims do, but each must
// write its own C). Small products run in parallel over the batch, one thread
// each; large ones run one after another, each using every thread.
template <class T>
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                  T alpha, const T* a, const int64_t* a_offsets, int64_t lda, const T* b,
                  const int64_t* b_offsets, int64_t ldb, T beta, T* c, const int64_t* c_offsets,
                  int64_t ldc);

}  // namespace lockstep::native
