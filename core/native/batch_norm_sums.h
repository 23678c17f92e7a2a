// core/native/batch_norm_sums.h — the per-run loops both batch-norm passes
// share (core/native/batch_norm.cpp): the forward's statistics sums, the
// backward's gradient sums with the fused ReLU's mask, and the per-channel
// affine coefficients that forward and backward must round alike. Internal to
// batch_norm.cpp.
//
// Read before: core/native/nn_kernels.h, core/native/fused_relu.h.
// Read next: core/native/batch_norm.cpp (its notes, forward_impl, backward_impl).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace lockstep::native::batch_norm_detail {

// Values summed in T before the partial sums go to double (see the header of core/native/batch_norm.cpp).
inline constexpr int64_t kSumBlock = 4096;

// The forward's y = fma(x, scale, shift) of channel ch, from the saved mean and
// invstd (Note [ReLU mask from the input]); w, b may be null (1 and 0).
template <class T>
struct Affine {
  T scale, shift;
};
template <class T>
Affine<T> affine_coefficients(T mean, T invstd, const T* w, const T* b, int64_t ch) {
  const double scale = (w != nullptr ? static_cast<double>(w[ch]) : 1.0) * invstd;
  return {static_cast<T>(scale),
          static_cast<T>((b != nullptr ? static_cast<double>(b[ch]) : 0.0) - mean * scale)};
}

// The backward's per-channel dx = a * g + bx * x + c0, from k = w * invstd and
// the statistics pass's sums over the channel's M values: training,
//   dx = k * (g - sum_g / M - xhat * sum_g_xhat / M),  xhat = (x - mean) * invstd;
// eval, dx = k * g (the statistics are constants).
template <class T>
struct GradInput {
  T a, bx, c0;
};
template <class T>
GradInput<T> grad_input_coefficients(double w, double mean, double invstd, double sum_g,
                                     double sum_g_xhat, int64_t m, bool training) {
  const double k = w * invstd;
  const double mean_g = training ? sum_g / static_cast<double>(m) : 0.0;
  const double mean_g_xhat = training ? sum_g_xhat / static_cast<double>(m) : 0.0;
  return {static_cast<T>(k), static_cast<T>(-k * invstd * mean_g_xhat),
          static_cast<T>(-k * mean_g + k * invstd * mean_g_xhat * mean)};
}

// Where the ReLU's mask comes from in a backward: none (plain batch norm), the
// saved output (out > 0), the input (fma(x, scale, shift) > 0), or bits the
// forward wrote (channels-last bf16 only: Note [ReLU mask in bits] in
// autograd/functions/batch_norm.cpp).
enum class Mask { None, Output, Input, Bits };

// Sums of d = run[j] - shift and of d^2 over a run of s values, in T across
// SIMD lanes within each block of kSumBlock, in double across blocks.
template <class T>
inline void run_shifted_sums(const T* run, int64_t s, T shift, double& sum, double& sum_sq) {
  for (int64_t lo = 0; lo < s; lo += kSumBlock) {
    const int64_t hi = std::min(s, lo + kSumBlock);
    T acc = 0, acc_sq = 0;
#pragma omp simd reduction(+ : acc, acc_sq)
    for (int64_t j = lo; j < hi; ++j) {
      const T d = run[j] - shift;
      acc += d;
      acc_sq += d * d;
    }
    sum += acc;
    sum_sq += acc_sq;
  }
}

#if defined(__AVX512F__)
// grad_sums (below) for float32, written out: in the masked loop GCC kept the
// `omp simd reduction`'s private accumulators on the stack (perf annotate: a
// store and reload of both every 16 values). Measured with streaming stores
// for the output: docs/results/kernel_choices.md.
template <Mask M>
inline void grad_sums_avx512(const float* g, const float* x, const float* y, int64_t s, float mean,
                             Affine<float> affine, double& sum_g, double& sum_g_xmu,
                             float* gm_out, bool stream_gm) {
  const __m512 zero = _mm512_setzero_ps(), vmean = _mm512_set1_ps(mean);
  const __m512 vscale = _mm512_set1_ps(affine.scale), vshift = _mm512_set1_ps(affine.shift);
  for (int64_t lo = 0; lo < s; lo += kSumBlock) {  // kSumBlock is a multiple of 16
    const int64_t hi = std::min(s, lo + kSumBlock);
    __m512 acc = zero, acc_xmu = zero;
    for (int64_t j = lo; j < hi; j += 16) {
      const __mmask16 in = hi - j >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (hi - j)) - 1);
      __mmask16 live = in;
      const __m512 vx = _mm512_maskz_loadu_ps(in, x + j);
      if constexpr (M == Mask::Output) {
        live = _mm512_mask_cmp_ps_mask(in, _mm512_maskz_loadu_ps(in, y + j), zero, _CMP_GT_OQ);
      } else if constexpr (M == Mask::Input) {
        live = _mm512_mask_cmp_ps_mask(in, _mm512_fmadd_ps(vx, vscale, vshift), zero, _CMP_GT_OQ);
      }
      const __m512 gm = _mm512_maskz_loadu_ps(live, g + j);  // 0 where masked or past s
      if (gm_out != nullptr) {
        if (stream_gm && in == 0xFFFF && (reinterpret_cast<uintptr_t>(gm_out + j) & 63) == 0) {
          _mm512_stream_ps(gm_out + j, gm);  // Note [Streaming stores]
        } else {
          _mm512_mask_storeu_ps(gm_out + j, in, gm);
        }
      }
      acc = _mm512_add_ps(acc, gm);
      acc_xmu = _mm512_fmadd_ps(gm, _mm512_sub_ps(vx, vmean), acc_xmu);
    }
    alignas(64) float lanes[16], lanes_xmu[16];  // the lanes, added in double
    _mm512_store_ps(lanes, acc);
    _mm512_store_ps(lanes_xmu, acc_xmu);
    for (int l = 0; l < 16; ++l) {
      sum_g += lanes[l];
      sum_g_xmu += lanes_xmu[l];
    }
  }
}
#endif

// Whether the fused ReLU let value j of a run through (mask M; see Mask).
template <Mask M, class T>
inline bool relu_live(const T* x, const T* y, int64_t j, Affine<T> affine) {
  if constexpr (M == Mask::Output) return y[j] > T(0);
  if constexpr (M == Mask::Input) return std::fma(x[j], affine.scale, affine.shift) > T(0);
  return true;
}

// Adds sum gm and sum gm * (x - mean) over a run of s values to sum_g and
// sum_g_xmu, gm = g, or g masked to 0 where the fused ReLU's output is 0 (mask
// M: y <= 0, or fma(x, scale, shift) <= 0); both sums in one pass, in T across
// SIMD lanes. When gm_out is not null, gm is also stored there
// (batch_norm_add_relu's residual gradient), with streaming stores where it can
// when stream_gm (float32 with AVX-512 only).
template <class T, Mask M>
inline void grad_sums(const T* g, const T* x, const T* y, int64_t s, T mean, Affine<T> affine,
                      double& sum_g, double& sum_g_xmu, T* gm_out = nullptr,
                      bool stream_gm = false) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    grad_sums_avx512<M>(g, x, y, s, mean, affine, sum_g, sum_g_xmu, gm_out, stream_gm);
    return;
  }
#endif
  for (int64_t lo = 0; lo < s; lo += kSumBlock) {
    const int64_t hi = std::min(s, lo + kSumBlock);
    T acc = 0, acc_xmu = 0;
#pragma omp simd reduction(+ : acc, acc_xmu)
    for (int64_t j = lo; j < hi; ++j) {
      const T gm = relu_live<M>(x, y, j, affine) ? g[j] : T(0);
      if (gm_out != nullptr) gm_out[j] = gm;
      acc += gm;
      acc_xmu += gm * (x[j] - mean);
    }
    sum_g += acc;
    sum_g_xmu += acc_xmu;
  }
}

}  // namespace lockstep::native::batch_norm_detail
