// core/native/gemm.cpp — the GEMM backends: reference loops, Eigen, oneDNN.
//
// § Note [GEMM backends]
// All three compute C = alpha * op(A) * op(B) + beta * C on row-major buffers
// (see core/native/gemm.h). The reference is the definition written as three
// loops; the fast paths hand the same buffers, untouched, to a library:
//   - Eigen: Eigen::Map views the buffers as row-major matrices with an outer
//     stride (the leading dimension); op(X) is a lazy .transpose(), so no copy.
//     Eigen parallelises large products with OpenMP (omp_get_max_threads(),
//     which ls::set_num_threads sets) and runs serially inside a parallel region.
//   - oneDNN: dnnl_sgemm takes row-major arguments directly. This oneDNN is
//     built with the OpenMP runtime, so it too follows ls::set_num_threads and
//     runs serially when called inside a parallel region. It has no double GEMM:
//     GemmBackend::OneDNN computes double with Eigen.
// The default backend is the one measured fastest on this project's machine
// (bench/bench_gemm, medians over its 18 shapes at 1 and 2 threads): oneDNN, whose
// median is the higher, although Eigen wins some square and long-K shapes and
// tiny products (n <= 16, where oneDNN's per-call cost dominates; small next to
// allocating the output). The numbers, the machine and the command that
// re-measures them: docs/results/gemm.md.
//
// Read before: core/native/gemm.h. Read next: core/native/linalg.cpp.
#include "core/native/gemm.h"

#include <algorithm>
#include <atomic>
#include <type_traits>

// GCC 12 reports false "may be used uninitialized" warnings inside Eigen's
// AVX-512 packing code; they are not ours to fix.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop
#include <oneapi/dnnl/dnnl.h>

#include "core/error.h"
#include "core/native/dispatch_verbose.h"
#include "core/native/fast/onednn_engine.h"
#include "core/parallel.h"
#include "core/profiler.h"

namespace lockstep::native {

namespace {

std::atomic<GemmBackend> g_backend{GemmBackend::OneDNN};

// The checks every backend shares: sizes non-negative, leading dims wide enough.
void check_gemm_args(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda,
                     int64_t ldb, int64_t ldc) {
  LS_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm: sizes must be non-negative, got m=", m, " n=", n,
           " k=", k);
  const int64_t a_width = trans_a ? m : k;  // A is stored (m, k), or (k, m) when transposed
  const int64_t b_width = trans_b ? k : n;  // B is stored (k, n), or (n, k) when transposed
  LS_CHECK(lda >= std::max<int64_t>(1, a_width), "gemm: lda=", lda,
           " is smaller than the stored width ", a_width, " of A (trans_a=", trans_a, ")");
  LS_CHECK(ldb >= std::max<int64_t>(1, b_width), "gemm: ldb=", ldb,
           " is smaller than the stored width ", b_width, " of B (trans_b=", trans_b, ")");
  LS_CHECK(ldc >= std::max<int64_t>(1, n), "gemm: ldc=", ldc, " is smaller than n=", n);
}

// C = beta * C, where beta == 0 writes zeros without reading C.
template <class T>
void scale_c(T beta, T* c, int64_t m, int64_t n, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    }
  }
}

// ---- Eigen ----

template <class T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ConstMatrixMap = Eigen::Map<const RowMajor<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using MatrixMap = Eigen::Map<RowMajor<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

template <class T>
void gemm_eigen(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  // The matrices as stored; op() is applied below as a lazy transpose.
  ConstMatrixMap<T> a_stored(a, trans_a ? k : m, trans_a ? m : k, Eigen::OuterStride<>(lda));
  ConstMatrixMap<T> b_stored(b, trans_b ? n : k, trans_b ? k : n, Eigen::OuterStride<>(ldb));
  MatrixMap<T> c_map(c, m, n, Eigen::OuterStride<>(ldc));
  if (beta == T(0)) {
    c_map.setZero();
  } else if (beta != T(1)) {
    c_map *= beta;
  }
  // One GEMM call accumulating into C (noalias: C does not overlap A or B).
  auto accumulate = [&](const auto& op_a, const auto& op_b) {
    c_map.noalias() += alpha * op_a * op_b;
  };
  if (!trans_a && !trans_b) accumulate(a_stored, b_stored);
  if (!trans_a && trans_b) accumulate(a_stored, b_stored.transpose());
  if (trans_a && !trans_b) accumulate(a_stored.transpose(), b_stored);
  if (trans_a && trans_b) accumulate(a_stored.transpose(), b_stored.transpose());
}

// ---- oneDNN ----

void gemm_onednn(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc) {
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k,
                                          alpha, a, lda, b, ldb, beta, c, ldc);
  LS_CHECK(status == dnnl_success, "gemm: dnnl_sgemm failed with status ",
           static_cast<int>(status), " for m=", m, " n=", n, " k=", k, " lda=", lda,
           " ldb=", ldb, " ldc=", ldc, "; try set_gemm_backend(GemmBackend::Eigen)");
}

}  // namespace

void set_gemm_backend(GemmBackend backend) { g_backend.store(backend); }
GemmBackend gemm_backend() { return g_backend.load(); }

const char* gemm_backend_name(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::Reference: return "reference";
    case GemmBackend::Eigen: return "eigen";
    case GemmBackend::OneDNN: return "onednn";
  }
  return "unknown";
}

const char* gemm_impl_name(GemmImpl impl) {
  switch (impl) {
    case GemmImpl::Nothing: return "nothing";
    case GemmImpl::ScaleC: return "scale_c";
    case GemmImpl::Reference: return "reference";
    case GemmImpl::Eigen: return "eigen";
    case GemmImpl::OneDNN: return "onednn";
    case GemmImpl::Bf16Reference: return "bf16_reference";
    case GemmImpl::Bf16OneDNN: return "bf16_onednn";
    case GemmImpl::Bf16ViaFloat32: return "bf16_via_float32";
  }
  return "unknown";
}

namespace {

GemmImpl gemm_impl(GemmBackend backend, ScalarType dtype, int64_t m, int64_t n, int64_t k,
                   bool alpha_zero) {
  if (dtype == kBFloat16) {
    if (m == 0 || n == 0) return GemmImpl::Nothing;
    if (k == 0 || backend == GemmBackend::Reference) return GemmImpl::Bf16Reference;
    // Note [bf16 without oneDNN kernels] in gemm_bf16_via_float32.cpp.
    return onednn_detail::has_bf16() ? GemmImpl::Bf16OneDNN : GemmImpl::Bf16ViaFloat32;
  }
  if (backend == GemmBackend::Reference) return GemmImpl::Reference;
  if (m == 0 || n == 0) return GemmImpl::Nothing;
  if (k == 0 || alpha_zero) return GemmImpl::ScaleC;
  // oneDNN has no double GEMM: double runs on Eigen under either fast backend.
  if (dtype == kFloat32 && backend == GemmBackend::OneDNN) return GemmImpl::OneDNN;
  return GemmImpl::Eigen;
}

}  // namespace

GemmImpl choose_gemm(GemmBackend backend, ScalarType dtype, bool trans_a, bool trans_b, int64_t m,
                     int64_t n, int64_t k, bool alpha_zero) {
  const GemmImpl impl = gemm_impl(backend, dtype, m, n, k, alpha_zero);
  if (dispatch_verbose()) {
    log_dispatch("gemm", gemm_impl_name(impl), dtype,
                 lockstep::detail::str("m ", m, " n ", n, " k ", k, trans_a ? " A^T" : "",
                                       trans_b ? " B^T" : ""));
  }
  return impl;
}

template <class T>
void gemm_reference(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha,
                    const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  check_gemm_args(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  // op(A)[i, p] and op(B)[p, j], reading the stored matrices.
  auto op_a = [&](int64_t i, int64_t p) { return trans_a ? a[p * lda + i] : a[i * lda + p]; };
  auto op_b = [&](int64_t p, int64_t j) { return trans_b ? b[j * ldb + p] : b[p * ldb + j]; };
  // Rows of C are independent; split them over threads when there is enough work.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, n * k));
  parallel_for(0, m, grain, [&](int64_t row_begin, int64_t row_end) {
    for (int64_t i = row_begin; i < row_end; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        T dot = 0;
        for (int64_t p = 0; p < k; ++p) dot += op_a(i, p) * op_b(p, j);
        T& c_ij = c[i * ldc + j];
        c_ij = beta == T(0) ? alpha * dot : alpha * dot + beta * c_ij;
      }
    }
  });
}

template <class T>
void gemm_with(GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
               T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
               int64_t ldc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  profiler::mark_gemm();  // Note [Profiler bytes]
  const GemmImpl impl = choose_gemm(backend, std::is_same_v<T, float> ? kFloat32 : kFloat64,
                                    trans_a, trans_b, m, n, k, alpha == T(0));
  if (impl == GemmImpl::Reference) {  // checks its arguments itself
    gemm_reference(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  check_gemm_args(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  switch (impl) {
    case GemmImpl::Nothing: return;
    case GemmImpl::ScaleC: scale_c(beta, c, m, n, ldc); return;
    case GemmImpl::OneDNN:
      if constexpr (std::is_same_v<T, float>) {
        gemm_onednn(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
      }
      break;
    default: break;
  }
  gemm_eigen(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  gemm_with(gemm_backend(), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Products below this many multiply-adds (128^3) are too small to split well over
// threads, so a batch of them is split by product instead.
constexpr int64_t kSmallGemmMacs = int64_t{1} << 21;

template <class T>
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                  T alpha, const T* a, const int64_t* a_offsets, int64_t lda, const T* b,
                  const int64_t* b_offsets, int64_t ldb, T beta, T* c, const int64_t* c_offsets,
                  int64_t ldc) {
  LS_CHECK(batch >= 0, "gemm_batched: batch must be non-negative, got ", batch);
  profiler::mark_gemm();  // this thread's scope; workers open none
  check_gemm_args(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  const GemmBackend backend = gemm_backend();
  const bool small = m * n * k <= kSmallGemmMacs;
  // grain == batch keeps the loop on this thread, and each gemm uses every thread.
  parallel_for(0, batch, small ? 1 : batch, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      gemm_with(backend, trans_a, trans_b, m, n, k, alpha, a + a_offsets[i], lda,
                b + b_offsets[i], ldb, beta, c + c_offsets[i], ldc);
    }
  });
}

#define LS_INSTANTIATE_GEMM(T)                                                                  \
  template void gemm<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*,  \
                        int64_t, T, T*, int64_t);                                               \
  template void gemm_with<T>(GemmBackend, bool, bool, int64_t, int64_t, int64_t, T, const T*,   \
                             int64_t, const T*, int64_t, T, T*, int64_t);                       \
  template void gemm_reference<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t,  \
                                  const T*, int64_t, T, T*, int64_t);                           \
  template void gemm_batched<T>(int64_t, bool, bool, int64_t, int64_t, int64_t, T, const T*,    \
                                const int64_t*, int64_t, const T*, const int64_t*, int64_t, T,  \
                                T*, const int64_t*, int64_t);
LS_INSTANTIATE_GEMM(float)
LS_INSTANTIATE_GEMM(double)
#undef LS_INSTANTIATE_GEMM

}  // namespace lockstep::native
