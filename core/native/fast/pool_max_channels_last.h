// core/native/fast/pool_max_channels_last.h — max_pool2d on channels-last bfloat16 images.
//
// ResNet's stem pool (3x3, stride 2, padding 1) sits between two channels-last
// layers (Note [Channels-last activations] in core/native/memory_format.h); these
// kernels pool such an image in its own order, so the chain is not reordered to
// NCHW and back. Same results as the NCHW kernels of core/native/pool.cpp, bit for
// bit: each output takes the first maximum of its window in row-major order (the
// last NaN, if any), its index is flat in the input plane (iy W + ix), and the
// backward sums each input's gradients in float32 in output order, rounded once.
// See Note [Channel-vector max-pool] in the .cpp.
//
// Read before: core/native/pool.cpp. Read next: core/native/fast/pool_max_channels_last.cpp.
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/native/pool_rules.h"

namespace lockstep::native::detail {

// x (N, H, W, C) bf16 -> y (N, oH, oW, C) bf16 and idx (N, oH, oW, C) int64: the
// buffers behind channels-last (N, C, H, W) and (N, C, oH, oW) tensors.
void max_pool_channels_last(const BFloat16* x, const rules::PoolWindow& p, int64_t n, int64_t c,
                            BFloat16* y, int64_t* idx);

// gy, idx (N, oH, oW, C) -> gx (N, H, W, C) bf16, every element written.
void max_pool_channels_last_backward(const BFloat16* gy, const int64_t* idx,
                                     const rules::PoolWindow& p, int64_t n, int64_t c,
                                     BFloat16* gx);

}  // namespace lockstep::native::detail
