// core/native/nn_kernels_transformer.h — the CPU kernels behind the layers of an
// MLP or a transformer: linear, layer_norm, embedding, dropout and the losses.
//
// Like core/native/native.h these are pure functions of tensors, with no
// autograd: each forward returns what its backward needs besides its inputs
// (layer_norm's row statistics, dropout's mask, cross_entropy's log-probabilities),
// and each backward is a function of those. The differentiable ops that call
// them (core/nn_ops.h) live in autograd/functions/. One file per family:
//   linear.cpp      y = x W^T + b as one GEMM, and its three gradients
//   layer_norm.cpp  normalise each row over the trailing dims, then scale and shift
//   embedding.cpp   gather rows of a table; backward scatters them back
//   dropout.cpp     Bernoulli mask from the default generator, scaled by 1 / (1 - p)
//   loss.cpp        fused log-softmax + NLL (cross_entropy) and mse_loss
// Floating kernels take float32 or float64; every operand of one call must have
// the same dtype (convert first). Results are new contiguous tensors.
//
// Read before: core/native/kernel_api_nn.h, core/native/gemm.h. Read next: core/native/linear.cpp,
// autograd/functions/linear.cpp.
#pragma once

#include "core/native/nn_kernels.h"

// Declared, with their contracts, in core/native/kernel_api_nn.h (Note [Kernel API
// declared once]): linear_forward/_backward, layer_norm_forward/_backward,
// embedding_forward/_backward, dropout_forward/_backward, cross_entropy_forward/
// _backward, mse_loss_forward/_backward.

namespace lockstep::native {

// CPU only. dropout_forward of a float32 input with the result written in out_dtype
// (bfloat16): the same mask, and the values of its float32 result converted, in one
// pass (Note [dropout writing the bf16 copy] in autograd/functions/autocast_ops.h).
std::tuple<Tensor, Tensor> dropout_forward_to(const Tensor& input, double p, ScalarType out_dtype);

// CPU only. h = x + dropout(y) for a float32 x and a bfloat16 y of one shape: the
// float32 add of dropout_forward's bf16 values, in one pass, and the mask; its
// backward takes dL/dh (float32) and returns dL/dy in bf16, the add's gradient
// rounded as the add hands it on, times the mask and scale (Note [dropout + residual
// add in one pass] in autograd/functions/autocast_ops.h). dL/dx is dL/dh itself.
std::tuple<Tensor, Tensor> dropout_add_forward(const Tensor& x, const Tensor& y, double p);
Tensor dropout_add_backward(const Tensor& grad, const Tensor& mask, double p);

}  // namespace lockstep::native
