// core/nn_ops.h — the differentiable neural-network ops: convolution, pooling,
// normalisation, embedding, dropout, losses, and the fused linear layer.
//
// Like the ops in core/tensor.h they are declared in core and defined in
// autograd/functions/ (see Note [Where ops live]); their CPU kernels live in
// core/native/ (conv.cpp, pool.cpp, batch_norm.cpp, layer_norm.cpp,
// embedding.cpp, dropout.cpp, loss.cpp, linear.cpp; the fused ReLUs in
// fused_relu.h). nn::functional and the layers in nn/ call these. Shapes follow PyTorch: images are (N, C, H, W).
// Read before: core/tensor.h. Read next: nn/functional.h.
#pragma once

#include "core/tensor.h"

namespace lockstep {

// (N, in) x (out, in)^T + bias (out) -> (N, out); any leading dims: (*, in) -> (*, out).
// bias may be undefined.
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias);

// (N, C_in, H, W) conv (C_out, C_in / groups, kH, kW) + bias (C_out) -> (N, C_out, H', W'),
// H' = (H + 2 * pad_h - dil_h * (kH - 1) - 1) / stride_h + 1. bias may be undefined.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
              const IntList& stride = {1, 1}, const IntList& padding = {0, 0},
              const IntList& dilation = {1, 1}, int64_t groups = 1);

// (N, C, H, W) -> (N, C, H', W'): max over each kernel window (padding counts as -inf).
Tensor max_pool2d(const Tensor& input, const IntList& kernel_size, const IntList& stride,
                  const IntList& padding = {0, 0});
// (N, C, H, W) -> (N, C, oh, ow): average over adaptive windows, as PyTorch computes them.
Tensor adaptive_avg_pool2d(const Tensor& input, const IntList& output_size);

// (N, C, *) normalised per channel. Training: batch statistics, and running_mean /
// running_var (C) are updated in place with `momentum` (unbiased variance), when
// defined. Eval: the running statistics are used. weight/bias (C) may be undefined.
Tensor batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum, double eps);
// relu(batch_norm(...)) as one op, which keeps no batch-norm output alive (see
// Note [Fused BatchNorm + ReLU] in autograd/functions/batch_norm.cpp).
Tensor batch_norm_relu(const Tensor& input, const Tensor& weight, const Tensor& bias,
                       const Tensor& running_mean, const Tensor& running_var, bool training,
                       double momentum, double eps);
// relu(batch_norm(input, ...) + residual) as one op, residual of the input's shape
// and dtype: the end of a residual block, without writing the batch-norm output
// (Note [Fused BatchNorm + add + ReLU] in autograd/functions/batch_norm.cpp).
Tensor batch_norm_add_relu(const Tensor& input, const Tensor& residual, const Tensor& weight,
                           const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, bool training, double momentum, double eps);
// relu(batch_norm(input, ...) + batch_norm(residual, residual_...)) as one op, both
// batch norms with the same training, momentum and eps, residual of the input's
// shape and dtype: the end of a residual block that downsamples, without writing
// the residual's batch-norm output or its gradient (Note [Downsample batch norm
// folded] in core/native/fast/batch_norm_bf16_nhwc_pair.cpp).
Tensor batch_norm_add_batch_norm_relu(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                      const Tensor& running_mean, const Tensor& running_var,
                                      const Tensor& residual, const Tensor& residual_weight,
                                      const Tensor& residual_bias,
                                      const Tensor& residual_running_mean,
                                      const Tensor& residual_running_var, bool training,
                                      double momentum, double eps);
// max_pool2d(batch_norm_relu(input, ...), kernel_size, stride, padding) as one op: a
// ResNet's stem, without writing the batch-norm output or its gradient (Note [Stem batch
// norm, ReLU and max-pool in one pass] in core/native/fast/batch_norm_relu_pool_bf16_nhwc.cpp).
// An empty stride means the kernel size, as max_pool2d's.
Tensor batch_norm_relu_max_pool2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                  const Tensor& running_mean, const Tensor& running_var,
                                  bool training, double momentum, double eps,
                                  const IntList& kernel_size, const IntList& stride = {},
                                  const IntList& padding = {0, 0});
// relu(a + b) as one op: a residual add and its ReLU. Same shape and dtype: fused;
// otherwise (broadcasting, promotion) it is (a + b).relu().
Tensor add_relu(const Tensor& a, const Tensor& b);

// Normalises over the trailing dims given by normalized_shape; weight/bias have
// that shape (or are undefined).
Tensor layer_norm(const Tensor& input, const IntList& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps = 1e-5);

// Rows of weight (num, dim) picked by int64 indices of any shape -> (*indices, dim).
// Rows at padding_idx (if >= 0) get no gradient.
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx = -1);

// Training: zeroes each element with probability p and scales the rest by
// 1 / (1 - p), drawing from the default generator. Not training (or p == 0): identity.
Tensor dropout(const Tensor& input, double p, bool training);

// Mean cross-entropy of logits (N, C) against int64 class targets (N); targets
// equal to ignore_index count neither in the sum nor in the mean.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100);
// Mean squared error over all elements; shapes must match.
Tensor mse_loss(const Tensor& input, const Tensor& target);

}  // namespace lockstep
