// core/native/fused_relu.h — kernels with a ReLU folded into the op before it:
// batch_norm_relu and batch_norm_add_relu (batch_norm.cpp) and add_relu (add_relu.cpp).
//
// relu(op(x)) as two kernels reads and writes the whole activation twice and
// leaves op(x) alive until the ReLU has read it; fused, the op writes max(., 0)
// once. Backward needs only the fused output for the ReLU's mask (out > 0 iff
// op(x) > 0), which the backward kernels apply on the fly. Why the autograd
// functions save the output and nothing else: Note [Fused BatchNorm + ReLU] in
// autograd/functions/batch_norm.cpp.
//
// Read before: core/native/nn_kernels.h (batch_norm_forward / _backward, whose
// arguments and checks these share). Read next: core/native/batch_norm.cpp.
#pragma once

#include <tuple>

#include "core/native/nn_kernels.h"

namespace lockstep::native {

// batch_norm_relu_forward, batch_norm_relu_backward and add_relu, which have CUDA
// kernels too, are declared in core/native/kernel_api_nn.h (Note [Kernel API
// declared once]); the CPU-only fused kernels follow.

// relu(batch_norm_forward(...)'s output + residual), in one pass (Note [Fused
// BatchNorm + add + ReLU] in autograd/functions/batch_norm.cpp); residual has the
// input's shape, dtype and device. Returns (output, save_mean, save_invstd).
// Its backward is batch_norm_add_relu_backward. On a GPU: the two kernels in turn.
// relu_bits not null and a channels-last bfloat16 CPU input: the ReLU's mask is
// also written there as bits (Note [ReLU mask in bits] in
// autograd/functions/batch_norm.cpp), for batch_norm_add_relu_backward_bits; for
// any other input *relu_bits is left undefined (the output is the mask).
std::tuple<Tensor, Tensor, Tensor> batch_norm_add_relu_forward(
    const Tensor& input, const Tensor& residual, const Tensor& weight, const Tensor& bias,
    const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
    double eps, Tensor* relu_bits = nullptr);

// The backward of batch_norm_add_relu_forward, whose output is `output`:
// (grad_input, grad_weight, grad_bias, grad_residual), with grad_residual =
// grad_output * (output > 0) and the others batch_norm_backward of it. On the
// CPU in one kernel: the statistics pass stores the masked gradient, and the
// grad_input pass reads it back per channel while it is still in cache.
std::tuple<Tensor, Tensor, Tensor, Tensor> batch_norm_add_relu_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& save_mean,
    const Tensor& save_invstd, const Tensor& output, bool training, bool need_input,
    bool need_weight, bool need_bias);

// The same gradients with the mask from relu_bits, the bits batch_norm_add_relu_forward
// wrote for this channels-last bfloat16 input (its output not read): bit for bit
// batch_norm_add_relu_backward's results.
std::tuple<Tensor, Tensor, Tensor, Tensor> batch_norm_add_relu_backward_bits(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& save_mean,
    const Tensor& save_invstd, const Tensor& relu_bits, bool training, bool need_input,
    bool need_weight, bool need_bias);

// The same gradients without the output: the ReLU's mask is recomputed from the
// input, the forward's bias (may be undefined, i.e. 0) and the saved statistics,
// bit for bit as batch_norm_relu_forward rounded it (Note [ReLU mask from the
// input] in core/native/batch_norm.cpp); one activation-sized read fewer. CPU only.
std::tuple<Tensor, Tensor, Tensor> batch_norm_relu_backward_from_input(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& bias,
    const Tensor& save_mean, const Tensor& save_invstd, bool training, bool need_input,
    bool need_weight, bool need_bias);

// relu_backward(grad, output) (core/native/native.h), the gradient of add_relu
// for both of its inputs: grad where output > 0, else 0. Large float32 CPU
// tensors take a streaming-store loop (Note [Streaming stores] in
// core/native/fast/streaming_store.h), everything else relu_backward itself.
Tensor add_relu_backward(const Tensor& grad, const Tensor& output);

}  // namespace lockstep::native
