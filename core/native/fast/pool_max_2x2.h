// core/native/fast/pool_max_2x2.h — max_pool2d's 2x2 stride-2 unpadded window, float32 and
// bfloat16.
//
// The pool of VGG-style and small CNNs (the Fashion-MNIST SmallCNN's two), as
// one masked AVX-512 pass per output row: each output reads its four inputs
// straight from the two input rows, in row-major order, with the definition's
// rule (the first maximum, or the last NaN; core/native/pool.cpp). bf16 inputs
// compare as float32 and the maximum is stored back exactly (it is one of the
// inputs), so there is no widening pass. AVX-512 only: elsewhere
// max_pool_2x2_applies is false. See Note [2x2 max-pool] in the .cpp.
//
// Read before: core/native/pool.cpp. Read next: core/native/fast/pool_max_2x2.cpp.
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/native/pool_rules.h"

namespace lockstep::native::detail {

// Whether max_pool_2x2_planes takes the window: kernel 2x2, stride 2, no padding.
bool max_pool_2x2_applies(const rules::PoolWindow& p);

// max_pool2d forward of planes [plane_lo, plane_hi) of x (contiguous planes of
// p.h x p.w): y and idx are (planes, oh, ow), idx flat in each input plane.
// Runs on the calling thread.
void max_pool_2x2_planes(const float* x, const rules::PoolWindow& p, float* y, int64_t* idx,
                         int64_t plane_lo, int64_t plane_hi);
void max_pool_2x2_planes(const BFloat16* x, const rules::PoolWindow& p, BFloat16* y, int64_t* idx,
                         int64_t plane_lo, int64_t plane_hi);

}  // namespace lockstep::native::detail
