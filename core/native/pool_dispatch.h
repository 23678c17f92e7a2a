// core/native/pool_dispatch.h — which implementation runs max_pool2d on the CPU,
// chosen in one place (Note [Kernel dispatch] in dispatch_verbose.h).
//
// max_pool2d_forward / max_pool2d_backward (pool.cpp) call choose_max_pool once
// and run what it names; the rules are the one screen of pool_dispatch.cpp.
// CUDA tensors go to core/cuda/pool.cu through LS_DISPATCH_CUDA first.
//
// Read before: core/native/pool_rules.h, core/native/dispatch_verbose.h.
// Read next: core/native/pool_dispatch.cpp, core/native/pool.cpp.
#pragma once

#include "core/native/pool_rules.h"
#include "core/tensor.h"

namespace lockstep::native {

// Every CPU implementation of max-pooling, with the file that runs it. A bf16
// image that is not channels-last runs the float32 implementation named, plane
// by plane on widened copies (Note [bfloat16 pooling] in pool.cpp), except the
// 2x2 kernel, which reads bf16 itself.
enum class MaxPoolImpl {
  ChannelsLastBf16,  // fast/pool_max_channels_last.cpp: a channels-last bf16 image in its order
  TwoByTwo,          // fast/pool_max_2x2.cpp: 2x2 windows at stride 2 (float32, bf16)
  SideBySide,        // pool.cpp: unpadded windows side by side along rows, whole rows at once
  Separable,         // fast/pool_max_fast.cpp: row maxima, then column maxima (float32, bf16)
  Windows,           // pool.cpp: window by window, vectorized interior, clipped border
  Scatter,           // backward: each gradient added at its index (pool.cpp, pool_max_fast.cpp)
};
const char* max_pool_impl_name(MaxPoolImpl impl);  // "channels_last_bf16", "2x2", ...

// The forward's implementation for `input` (N, C, H, W) pooled by `win` (checked).
// Under LOCKSTEP_VERBOSE=dispatch prints the choice.
MaxPoolImpl choose_max_pool(const Tensor& input, const rules::PoolWindow& win);
// The backward's: ChannelsLastBf16 for a bf16 gradient whose indices are
// channels-last (the forward pooled a channels-last image), else Scatter.
MaxPoolImpl choose_max_pool_backward(const Tensor& grad_output, const Tensor& indices);

// Whether pool.cpp's side-by-side loop takes `win` (defined in pool.cpp, beside it).
bool max_pool_side_by_side_applies(const rules::PoolWindow& win);

}  // namespace lockstep::native
