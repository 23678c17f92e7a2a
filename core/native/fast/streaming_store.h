// core/native/fast/streaming_store.h — writing a large output with non-temporal
// ("streaming") stores, for the memory-bound CPU kernels whose outputs are
// tens of MB: batch_norm(_relu, _add_relu) forward and backward (both of
// batch_norm_add_relu's gradients), add_relu forward and backward.
//
// § Note [Streaming stores]
// A normal store first reads the cache line it writes into ("read for
// ownership"), so a kernel that reads one tensor and writes another moves
// three tensors' worth of bytes, not two. A streaming store (_mm512_stream_ps)
// writes the line without reading it and without keeping it in the caches.
// That is a win only when the output would not stay cached anyway: on this
// project's machine (2 MiB L2 per core) outputs of about 10 MB and below were
// read back from the cache by the next kernel, so streaming them lost more than
// it saved (the measurements: docs/results/kernel_choices.md). Hence the cut at
// kStreamingBytes (12 MiB): in ResNet50 at batch 8 it takes the activations and
// gradients of 12.8 MB and more (56x56 with 128 or 256 channels, 28x28 with
// 512, the 112x112 stem).
// Only float32 with AVX-512 streams; everything else (float64, other CPUs,
// smaller outputs) runs the kernels' plain loops. The streaming kernels compute
// the same expressions as those loops, up to float rounding (where an FMA is
// formed may differ), and are tested against them (tests/core/test_batch_norm.cpp,
// tests/core/test_add_relu.cpp). After streaming stores, the thread that made
// them must fence (stream_fence) before another thread reads the output, i.e.
// at the end of each parallel_for chunk.
//
// Read before: core/native/elementwise_loop.h. Read next: core/native/batch_norm.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace lockstep::native::detail {

// Outputs of at least this many bytes are written with streaming stores.
inline constexpr int64_t kStreamingBytes = int64_t{12} << 20;

#if defined(__AVX512F__)
inline constexpr bool kHaveStreamingStores = true;
#else
inline constexpr bool kHaveStreamingStores = false;
#endif

// Whether a T output of `numel` elements is written with streaming stores.
template <class T>
bool use_streaming_stores(int64_t numel) {
  return kHaveStreamingStores && sizeof(T) == 4 && numel * 4 >= kStreamingBytes;
}

#if defined(__AVX512F__)
// std::max(v, 0) per lane: v unless v < 0 (so NaN and -0 pass through, as there).
// (Not _mm512_max_ps, which GCC 12 flags with a false -Wmaybe-uninitialized.)
inline __m512 relu16(__m512 v) {
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NLT_UQ), v);
}

// dst[j] = scalar(j) for j < s, with streaming stores for the 64-byte-aligned
// blocks of 16, whose values come from vector(j) (the same 16 values as
// scalar(j) .. scalar(j + 15)).
template <class Scalar, class Vector>
inline void stream_run(float* dst, int64_t s, Scalar&& scalar, Vector&& vector) {
  int64_t j = 0;
  while (j < s && (reinterpret_cast<uintptr_t>(dst + j) & 63) != 0) {
    dst[j] = scalar(j);
    ++j;
  }
  for (; j + 16 <= s; j += 16) _mm512_stream_ps(dst + j, vector(j));
  for (; j < s; ++j) dst[j] = scalar(j);
}
#endif

// The kernels below write one run of s floats; with AVX-512 through streaming
// stores, otherwise (never chosen by use_streaming_stores) with plain ones.

// dst = a x + b, or max(a x + b, 0) when relu (batch_norm(_relu) forward), with
// a x + b as one fused multiply-add (Note [ReLU mask from the input] in
// core/native/batch_norm.cpp).
inline void stream_affine_run(const float* x, float* dst, int64_t s, float a, float b, bool relu) {
#if defined(__AVX512F__)
  const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  auto affine = [&](int64_t j) { return _mm512_fmadd_ps(_mm512_loadu_ps(x + j), va, vb); };
  if (relu) {
    stream_run(
        dst, s, [&](int64_t j) { return std::max(std::fma(x[j], a, b), 0.0f); },
        [&](int64_t j) { return relu16(affine(j)); });
  } else {
    stream_run(dst, s, [&](int64_t j) { return std::fma(x[j], a, b); }, affine);
  }
#else
  for (int64_t j = 0; j < s; ++j) {
    dst[j] = relu ? std::max(std::fma(x[j], a, b), 0.0f) : std::fma(x[j], a, b);
  }
#endif
}

// dst = a gm + bx x + c0, gm = g, or g masked to 0 where y <= 0 when y is not
// null (batch_norm(_relu) backward's grad_input).
inline void stream_grad_run(const float* g, const float* x, const float* y, float* dst, int64_t s,
                            float a, float bx, float c0) {
#if defined(__AVX512F__)
  const __m512 va = _mm512_set1_ps(a), vbx = _mm512_set1_ps(bx), vc0 = _mm512_set1_ps(c0);
  const __m512 zero = _mm512_setzero_ps();
  auto combine = [&](int64_t j, __m512 gm) {
    return _mm512_add_ps(_mm512_fmadd_ps(vbx, _mm512_loadu_ps(x + j), _mm512_mul_ps(va, gm)), vc0);
  };
  if (y != nullptr) {
    stream_run(
        dst, s, [&](int64_t j) { return a * (y[j] > 0.0f ? g[j] : 0.0f) + bx * x[j] + c0; },
        [&](int64_t j) {
          const __mmask16 live = _mm512_cmp_ps_mask(_mm512_loadu_ps(y + j), zero, _CMP_GT_OQ);
          return combine(j, _mm512_maskz_loadu_ps(live, g + j));
        });
  } else {
    stream_run(
        dst, s, [&](int64_t j) { return a * g[j] + bx * x[j] + c0; },
        [&](int64_t j) { return combine(j, _mm512_loadu_ps(g + j)); });
  }
#else
  for (int64_t j = 0; j < s; ++j) {
    dst[j] = a * (y == nullptr || y[j] > 0.0f ? g[j] : 0.0f) + bx * x[j] + c0;
  }
#endif
}

// stream_grad_run with g masked to 0 where fma(x, scale, shift) <= 0: the ReLU
// mask recomputed from the input (Note [ReLU mask from the input] in
// core/native/batch_norm.cpp).
inline void stream_grad_run_input_mask(const float* g, const float* x, float* dst, int64_t s,
                                       float a, float bx, float c0, float scale, float shift) {
  auto live = [&](int64_t j) { return std::fma(x[j], scale, shift) > 0.0f; };
#if defined(__AVX512F__)
  const __m512 va = _mm512_set1_ps(a), vbx = _mm512_set1_ps(bx), vc0 = _mm512_set1_ps(c0);
  const __m512 vscale = _mm512_set1_ps(scale), vshift = _mm512_set1_ps(shift);
  const __m512 zero = _mm512_setzero_ps();
  stream_run(
      dst, s, [&](int64_t j) { return a * (live(j) ? g[j] : 0.0f) + bx * x[j] + c0; },
      [&](int64_t j) {
        const __m512 vx = _mm512_loadu_ps(x + j);
        const __mmask16 on =
            _mm512_cmp_ps_mask(_mm512_fmadd_ps(vx, vscale, vshift), zero, _CMP_GT_OQ);
        const __m512 gm = _mm512_maskz_loadu_ps(on, g + j);
        return _mm512_add_ps(_mm512_fmadd_ps(vbx, vx, _mm512_mul_ps(va, gm)), vc0);
      });
#else
  for (int64_t j = 0; j < s; ++j) dst[j] = a * (live(j) ? g[j] : 0.0f) + bx * x[j] + c0;
#endif
}

// dst = max((x a + b) + r, 0) (batch_norm_add_relu's forward: the affine
// batch-norm output plus the residual r, then the ReLU).
inline void stream_affine_add_relu_run(const float* x, const float* r, float* dst, int64_t s,
                                       float a, float b) {
#if defined(__AVX512F__)
  const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  stream_run(
      dst, s, [&](int64_t j) { return std::max(std::fma(x[j], a, b) + r[j], 0.0f); },
      [&](int64_t j) {
        return relu16(_mm512_add_ps(_mm512_fmadd_ps(_mm512_loadu_ps(x + j), va, vb),
                                    _mm512_loadu_ps(r + j)));
      });
#else
  for (int64_t j = 0; j < s; ++j) dst[j] = std::max(std::fma(x[j], a, b) + r[j], 0.0f);
#endif
}

// dst = max(a + b, 0) (add_relu).
inline void stream_add_relu_run(const float* a, const float* b, float* dst, int64_t s) {
#if defined(__AVX512F__)
  stream_run(
      dst, s, [&](int64_t j) { return std::max(a[j] + b[j], 0.0f); },
      [&](int64_t j) {
        return relu16(_mm512_add_ps(_mm512_loadu_ps(a + j), _mm512_loadu_ps(b + j)));
      });
#else
  for (int64_t j = 0; j < s; ++j) dst[j] = std::max(a[j] + b[j], 0.0f);
#endif
}

// dst = g where y > 0, else 0 (add_relu's backward, relu_backward's values).
inline void stream_relu_mask_run(const float* g, const float* y, float* dst, int64_t s) {
#if defined(__AVX512F__)
  const __m512 zero = _mm512_setzero_ps();
  stream_run(
      dst, s, [&](int64_t j) { return y[j] > 0.0f ? g[j] : 0.0f; },
      [&](int64_t j) {
        return _mm512_maskz_loadu_ps(
            _mm512_cmp_ps_mask(_mm512_loadu_ps(y + j), zero, _CMP_GT_OQ), g + j);
      });
#else
  for (int64_t j = 0; j < s; ++j) dst[j] = y[j] > 0.0f ? g[j] : 0.0f;
#endif
}

// Orders this thread's streaming stores before its later stores (and so before
// another thread sees the end of its parallel_for chunk).
inline void stream_fence() {
#if defined(__AVX512F__)
  _mm_sfence();
#endif
}

}  // namespace lockstep::native::detail
