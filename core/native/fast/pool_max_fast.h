// core/native/fast/pool_max_fast.h — max_pool2d's float32 fast paths: the forward as
// two separable passes (a max along each input row, then down the rows), and
// the backward's scatter into a per-plane scratch buffer written out with
// streaming stores. See Note [Separable max-pool] in pool_max_fast.cpp.
//
// Both exist to make ResNet50's stem pool, (8, 64, 112, 112) kernel 3 stride 2
// padding 1, run near memory speed; they give bit-for-bit the results of the
// per-window definition in core/native/pool.cpp (tests/core/test_pool.cpp).
//
// Read before: core/native/pool.cpp. Read next: core/native/fast/pool_max_fast.cpp.
#pragma once

#include <cstdint>

#include "core/native/pool_rules.h"

namespace lockstep::native::detail {

// Whether this build has the AVX-512 kernels of the separable forward; without
// them (or with use_avx512 = false) it runs the portable loops, which give the
// same results.
#if defined(__AVX512F__)
inline constexpr bool kHaveAvx512MaxPool = true;
#else
inline constexpr bool kHaveAvx512MaxPool = false;
#endif

// Whether separable_max_pool_planes takes this window: the plane is not empty
// and every flat position of it fits the passes' int32 indices.
bool separable_max_pool_applies(const rules::PoolWindow& p);

// How separable_max_pool_planes runs. The defaults are the fast choices; tests
// turn use_avx512 off to check the portable loops. Streaming (AVX-512 only, see
// Note [Streaming stores]) writes each plane's values or indices to a cached
// buffer first, then to y / idx without reading their cache lines.
struct SeparableMaxPoolOptions {
  bool use_avx512 = true;  // ignored where kHaveAvx512MaxPool is false
  bool stream_values = false;
  bool stream_indices = false;
};

// max_pool2d forward of planes [plane_lo, plane_hi) of x (N*C planes of p.h x
// p.w, contiguous): y and idx are (N*C, oh, ow), idx flat in each input plane.
// Runs on the calling thread.
void separable_max_pool_planes(const float* x, const rules::PoolWindow& p, float* y, int64_t* idx,
                               int64_t plane_lo, int64_t plane_hi,
                               const SeparableMaxPoolOptions& options);

// max_pool2d backward of planes [plane_lo, plane_hi): gx plane = 0, then
// gx[idx[i]] += gy[i] for the plane's outputs i in order. Planes of hw inputs and
// ohw outputs. With streaming (only meaningful with AVX-512, see Note [Streaming
// stores]) each plane is summed in a scratch buffer and streamed out; the sums
// are the same either way. Runs on the calling thread.
void max_pool_scatter_planes(const float* gy, const int64_t* idx, float* gx, int64_t hw,
                             int64_t ohw, int64_t plane_lo, int64_t plane_hi, bool streaming);

}  // namespace lockstep::native::detail
