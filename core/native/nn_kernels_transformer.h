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
// Read before: core/native/native.h, core/native/gemm.h. Read next: core/native/linear.cpp,
// autograd/functions/linear.cpp.
#pragma once

#include <tuple>

#include "core/tensor.h"

namespace lockstep::native {

// ---- linear (linear.cpp) ----
// (*, in) x weight (out, in) [+ bias (out)] -> (*, out). bias may be undefined.
Tensor linear_forward(const Tensor& input, const Tensor& weight, const Tensor& bias);
// Gradients of linear_forward for grad_output (*, out): (grad_input (*, in),
// grad_weight (out, in), grad_bias (out)); each is computed only when its
// `need_*` flag is set (undefined otherwise).
std::tuple<Tensor, Tensor, Tensor> linear_backward(const Tensor& grad_output, const Tensor& input,
                                                   const Tensor& weight, bool need_input,
                                                   bool need_weight, bool need_bias);

// ---- layer_norm (layer_norm.cpp) ----
// input (*, normalized_shape...) -> (output (same shape), mean (M), rstd (M)), where
// the M = numel / D rows are the leading elements and D = prod(normalized_shape);
// rstd = 1 / sqrt(var + eps) with the biased variance. weight/bias have
// normalized_shape, or are undefined.
std::tuple<Tensor, Tensor, Tensor> layer_norm_forward(const Tensor& input,
                                                      const IntList& normalized_shape,
                                                      const Tensor& weight, const Tensor& bias,
                                                      double eps);
// (grad_input, grad_weight, grad_bias) from the forward's mean and rstd; grad_weight
// and grad_bias only when requested and the affine parameters exist.
std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& grad_output,
                                                       const Tensor& input,
                                                       const IntList& normalized_shape,
                                                       const Tensor& mean, const Tensor& rstd,
                                                       const Tensor& weight, bool need_input,
                                                       bool need_weight, bool need_bias);

// ---- embedding (embedding.cpp) ----
// Rows of weight (num, dim) at int64/int32 indices of any shape -> (*indices, dim).
// Every index must be in [0, num); padding_idx is -1 (none) or in [0, num).
Tensor embedding_forward(const Tensor& weight, const Tensor& indices, int64_t padding_idx);
// grad_output (*indices, dim) summed into a zero (num_weights, dim) table at the
// indices; the padding_idx row stays zero.
Tensor embedding_backward(const Tensor& grad_output, const Tensor& indices, int64_t num_weights,
                          int64_t padding_idx);

// ---- dropout (dropout.cpp) ----
// Training dropout: (output, mask) with mask a bool tensor of input's shape (true =
// kept, drawn with probability 1 - p from the default generator) and output =
// input * mask / (1 - p). p must be in [0, 1]; p == 1 zeroes everything.
std::tuple<Tensor, Tensor> dropout_forward(const Tensor& input, double p);
// grad_output * mask / (1 - p) (zeros when p == 1).
Tensor dropout_backward(const Tensor& grad_output, const Tensor& mask, double p);

// ---- losses (loss.cpp) ----
// Mean cross-entropy of logits (N, C) against int64 targets (N): (loss (0-d),
// log_probs (N, C)). Rows whose target is ignore_index count neither in the sum nor
// in the mean; when every row is ignored the loss is NaN (0 / 0, as PyTorch 1.13).
std::tuple<Tensor, Tensor> cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                                 int64_t ignore_index);
// dL/dlogits (N, C) = (softmax - onehot(target)) * grad / count, zero rows where
// the target is ignored; grad is the loss's 0-d gradient.
Tensor cross_entropy_backward(const Tensor& grad, const Tensor& log_probs, const Tensor& target,
                              int64_t ignore_index);
// mean((input - target)^2) over all elements (0-d); shapes and dtypes must match.
Tensor mse_loss_forward(const Tensor& input, const Tensor& target);
// dL/dinput = 2 (input - target) * grad / numel (dL/dtarget is its negation).
Tensor mse_loss_backward(const Tensor& grad, const Tensor& input, const Tensor& target);

}  // namespace lockstep::native
