// core/native/nn_kernels.h — CPU kernels of the neural-network ops: the ones
// both backends implement, declared in kernel_api_nn.h (included at the end),
// and the CPU's own extras for conv2d and max_pool2d, below.
//
// Like core/native/native.h these are pure functions of tensors with no
// autograd: the differentiable ops of core/nn_ops.h (defined in
// autograd/functions/conv.cpp, pool.cpp, batch_norm.cpp, ...) call them.
//
// Files: conv.cpp (checks, im2col + GEMM reference), fast/conv_onednn.cpp (oneDNN
// float32 path), pool.cpp, batch_norm.cpp.
// Read before: core/native/native.h, core/native/kernel_api_nn.h, core/native/gemm.h.
// Read next: core/native/conv.cpp, autograd/functions/conv.cpp.
#pragma once

#include <memory>
#include <tuple>
#include <utility>

#include "core/tensor.h"

namespace lockstep::native {

// A per-dim option (stride, padding, ...) given as {v} or {h, w}, as the pair
// (h, w); `op` and `what` name the caller in the error for any other length.
std::pair<int64_t, int64_t> pair_param(const IntList& values, const char* op, const char* what);

// ---- convolution (conv.cpp, fast/conv_onednn.cpp) ----
// Two backends compute the same convolution (see Note [Convolution backends] in
// core/native/fast/conv_onednn.h):
//   Reference  im2col + GEMM (conv.cpp), the definition; float64 always runs it
//   OneDNN     oneDNN's convolution primitives for float32, the default
enum class ConvBackend { Reference, OneDNN };
// Process-wide choice used by conv2d_forward / conv2d_backward; tests and benchmarks switch it.
void set_conv_backend(ConvBackend backend);
ConvBackend conv_backend();
const char* conv_backend_name(ConvBackend backend);  // "reference", "onednn"

// The forward that training uses: also returns a workspace for the backward,
// or null (Note [Convolution workspace] in core/native/fast/conv_onednn.h). Without
// a weight gradient to come, call conv2d_forward.
struct ConvWorkspace;  // opaque; core/native/fast/conv_onednn.cpp
std::tuple<Tensor, std::shared_ptr<const ConvWorkspace>> conv2d_forward_training(
    const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
    const IntList& padding, const IntList& dilation, int64_t groups);
// What conv2d_backward_with may be handed besides the operands (each optional):
//   grad_input_sum  the input gradient is added into it (contiguous, the
//                   input's shape and dtype, CPU, seen by nobody else) and it
//                   is returned as the first result, need_input or not: Note
//                   [Convolution gradients summed in place] in core/native/fast/conv_onednn.h
//   workspace       what conv2d_forward_training returned for these operands
struct ConvBackwardExtras {
  Tensor grad_input_sum;
  std::shared_ptr<const ConvWorkspace> workspace;
};
std::tuple<Tensor, Tensor, Tensor> conv2d_backward_with(
    const ConvBackwardExtras& extras, const Tensor& grad_output, const Tensor& input,
    const Tensor& weight, const IntList& stride, const IntList& padding, const IntList& dilation,
    int64_t groups, bool need_input, bool need_weight, bool need_bias);

// ---- pooling (pool.cpp) ----
// For max_pool2d_backward's `tile`: {kH, kW} when windows of this kernel, stride
// and padding tile the input (stride = kernel, no padding), else empty.
IntList max_pool2d_tile(const IntList& kernel_size, const IntList& stride, const IntList& padding);

// ---- the nn kernels both backends implement (Note [Kernel API declared once]) ----
#include "core/native/kernel_api_nn.h"

}  // namespace lockstep::native
