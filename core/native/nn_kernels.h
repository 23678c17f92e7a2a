// core/native/nn_kernels.h — CPU kernels of the convolutional-network ops:
// conv2d, max_pool2d, adaptive_avg_pool2d and batch_norm, forward and backward.
//
// Like core/native/native.h these are pure functions of tensors with no
// autograd: the differentiable ops of core/nn_ops.h (defined in
// autograd/functions/conv.cpp, pool.cpp, batch_norm.cpp) call them. Images are
// (N, C, H, W); inputs may have any strides (they are made contiguous), results
// are new contiguous tensors in the input's dtype (float32 or float64).
// Each backward takes `need_*` flags so a gradient nobody wants is not computed;
// the tuple slot of a skipped gradient holds an undefined Tensor.
//
// Files: conv.cpp (checks, im2col + GEMM reference), fast/conv_onednn.cpp (oneDNN
// float32 path), pool.cpp, batch_norm.cpp.
// Read before: core/native/native.h, core/native/gemm.h.
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

// input (N, C_in, H, W), weight (C_out, C_in / groups, kH, kW), bias (C_out) or
// undefined -> (N, C_out, H', W') with H' = (H + 2 pad_h - dil_h (kH - 1) - 1) / stride_h + 1.
Tensor conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias,
                      const IntList& stride, const IntList& padding, const IntList& dilation,
                      int64_t groups);
// (grad_input, grad_weight, grad_bias) from grad_output (N, C_out, H', W').
std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& grad_output, const Tensor& input,
                                                   const Tensor& weight, const IntList& stride,
                                                   const IntList& padding, const IntList& dilation,
                                                   int64_t groups, bool need_input,
                                                   bool need_weight, bool need_bias);
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
// (N, C, H, W) -> (output (N, C, H', W'), indices int64 (N, C, H', W')), where
// H' = (H + 2 pad_h - kH) / stride_h + 1 and indices[n, c, i, j] is the flat
// position h * W + w of the maximum inside its (H, W) plane, as in PyTorch.
// An empty stride means stride = kernel_size. Padding counts as -inf and must be
// at most half the kernel; NaN wins (it propagates, as in PyTorch).
std::tuple<Tensor, Tensor> max_pool2d_forward(const Tensor& input, const IntList& kernel_size,
                                              const IntList& stride, const IntList& padding);
// Routes each grad_output element to its input position: (N, C, H, W) = input_sizes.
// `tile` = max_pool2d_tile(...) of the forward's window, or empty: when the
// windows tile the input, a channels-last bf16 gradient is written element by
// element instead of scattered (Note [Channel-vector max-pool in AVX-512]); an
// index outside its tile is then an error.
Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices,
                           const IntList& input_sizes, const IntList& tile = {});
// {kH, kW} when windows of this kernel, stride and padding tile the input
// (stride = kernel, no padding), else empty.
IntList max_pool2d_tile(const IntList& kernel_size, const IntList& stride, const IntList& padding);

// (N, C, H, W) -> (N, C, oh, ow); output window i covers rows
// [floor(i H / oh), ceil((i + 1) H / oh)), likewise for columns.
Tensor adaptive_avg_pool2d_forward(const Tensor& input, const IntList& output_size);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const IntList& input_sizes);

// ---- batch normalisation (batch_norm.cpp) ----
// input (N, C, *) normalised per channel over N and the trailing dims:
//   y = (x - mean_c) * invstd_c * weight_c + bias_c,   invstd_c = 1 / sqrt(var_c + eps).
// Training: mean/var are the batch statistics (biased var); running_mean and
// running_var, when defined, become (1 - momentum) * running + momentum * batch
// (the batch var unbiased, N / (N - 1), as PyTorch), written in place.
// Eval: mean/var are running_mean/running_var, which must be defined.
// Returns (output, save_mean (C), save_invstd (C)): the statistics used, which
// the backward takes. weight/bias (C) may be undefined (1 and 0).
std::tuple<Tensor, Tensor, Tensor> batch_norm_forward(const Tensor& input, const Tensor& weight,
                                                      const Tensor& bias,
                                                      const Tensor& running_mean,
                                                      const Tensor& running_var, bool training,
                                                      double momentum, double eps);
// (grad_input, grad_weight, grad_bias). In training mode grad_input includes the
// path through the batch statistics; in eval mode the statistics are constants.
std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& save_mean,
    const Tensor& save_invstd, bool training, bool need_input, bool need_weight, bool need_bias);

}  // namespace lockstep::native
