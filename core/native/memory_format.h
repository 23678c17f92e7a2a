// core/native/memory_format.h — channels-last 4-d tensors: (N, C, H, W) stored as (N, H, W, C).
//
// § Note [Channels-last activations]
// A 4-d tensor keeps its logical shape (N, C, H, W) whatever order its bytes are in;
// its strides say the order. "Contiguous" (NCHW) strides are (C H W, H W, W, 1);
// channels-last (NHWC, PyTorch's torch.channels_last) strides are (H W C, 1, W C, C):
// the C values of one pixel lie side by side. AMX convolution kernels read and write
// that order (a 1x1 convolution is then one GEMM over all N H W pixels), so under
// bf16 autocast the convolutions return channels-last activations
// (conv_bf16_channels_last(), LOCKSTEP_BF16_CHANNELS_LAST) and the ops of a
// conv -> batch norm -> ReLU chain keep that order instead of reordering at every op:
//   - the bf16 convolutions take either order and return channels-last
//     (core/native/conv_bf16.cpp, fast/conv_bf16_pointwise.cpp);
//   - the bf16 batch norms keep their input's order (core/native/batch_norm_bf16*.cpp);
//   - elementwise ops walk their operands in memory order and return the order of
//     a full-shape operand (core/native/elementwise_loop.h, result_like below);
//   - every other op reads any strides correctly: it calls contiguous() first, which
//     copies a channels-last tensor into NCHW order (a reorder, not an error).
// Values never depend on the order; only which loops run does.
//
// Read before: core/tensor.h (sizes and strides). Read next: core/native/conv_bf16.h.
#pragma once

#include <initializer_list>

#include "core/tensor.h"

namespace lockstep::native {

// The strides of a dense channels-last tensor of these (N, C, H, W) sizes.
IntList channels_last_strides(const IntList& sizes);

// True when t is 4-d with the strides of a dense (N, H, W, C) buffer (size-1 dims
// may have any stride). A tensor with C == 1 or H W == 1 is both this and contiguous.
bool is_channels_last(const Tensor& t);

// t is channels-last and not also NCHW: the kernels that have a channels-last
// form take it for such a t (where both hold, the bytes are the same either way).
bool stored_channels_last(const Tensor& t);

// A new tensor of (N, C, H, W) sizes with channels-last strides.
Tensor empty_channels_last(const IntList& sizes, ScalarType dtype);

// The (N H W, C) row-major matrix behind a channels-last (N, C, H, W) t: a view
// (row n H W + y W + x holds pixel (y, x) of image n), for kernels on raw buffers.
Tensor channels_last_rows(const Tensor& t);

// t's values in channels-last order: t itself when it already is, else a copy.
Tensor channels_last(const Tensor& t);

// True when t's elements fill its storage span in NCHW or in channels-last order,
// so a kernel may treat it as a flat array of numel() values.
bool is_dense(const Tensor& t);
// True when a and b have the same sizes and both are contiguous or both
// channels-last: flat loops over the two then pair the same elements.
bool same_dense_layout(const Tensor& a, const Tensor& b);

// A new tensor of `sizes` and `dtype` for an elementwise result: channels-last when
// one of the operands has exactly these sizes and is channels-last but not
// contiguous (Note [Channels-last activations]), else contiguous.
Tensor result_like(const IntList& sizes, ScalarType dtype, std::initializer_list<const Tensor*> operands);

}  // namespace lockstep::native
