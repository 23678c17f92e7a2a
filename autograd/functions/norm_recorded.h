// autograd/functions/norm_recorded.h — the backward formulas of batch_norm and
// layer_norm as recording ops, for a backward with create_graph (Note [Double
// backward] in autograd/double_backward.h).
//
// With statistics over the dims D (batch norm: every dim but the channel; layer
// norm: the normalized trailing dims), M elements each, xhat = (x - mean) invstd
// and y = xhat w + b, g = dL/dy, gw = g w:
//   dx = invstd (gw - mean_D(gw) - xhat mean_D(gw xhat))   (statistics of the batch)
//   dx = invstd gw                                          (running statistics: eval)
//   dw = sum over the other dims of g xhat,   db = sum over the other dims of g.
// The native kernels use the mean and invstd the forward saved; here, in
// training, they are recomputed from x with history, since they depend on x and
// the second derivative must see that. The fast path (no create_graph) stays the
// native kernels.
//
// Read before: autograd/functions/batch_norm.cpp, autograd/functions/layer_norm.cpp.
// Read next: autograd/functions/loss.cpp.
#pragma once

#include "autograd/node.h"

namespace lockstep::autograd {

// Which of (input, weight, bias) want a gradient.
struct NormGrads {
  bool input = true, weight = true, bias = true;
};

// The dtype the recorded formulas compute in for an input of `dtype`: float32 for
// bfloat16 (a storage type, as the kernels widen it), else the dtype itself.
inline ScalarType norm_compute_dtype(ScalarType dtype) { return dtype == kBFloat16 ? kFloat32 : dtype; }

// g, x (N, C, *); weight (C) or undefined; mean, invstd (C) as the forward saved them.
// A bfloat16 x is computed in float32 and dx returned as bfloat16.
variable_list batch_norm_backward_recorded(const Tensor& g, const Tensor& x, const Tensor& weight,
                                           const Tensor& mean, const Tensor& invstd, bool training,
                                           double eps, NormGrads need);

// The mask of a fused batch norm's ReLU (Note [Fused BatchNorm + ReLU] in batch_norm.cpp),
// a constant of the recorded formulas: output > 0 (bool), or, from the bits a
// channels-last bf16 forward wrote instead of saving the output (Note [ReLU mask in
// bits]), the kernel's residual gradient for a gradient of ones, > 0. x, weight,
// mean, invstd: the forward's input and what it saved.
Tensor relu_mask(const Tensor& output);
Tensor relu_mask_from_bits(const Tensor& x, const Tensor& weight, const Tensor& mean,
                           const Tensor& invstd, const Tensor& bits, bool training);

// g, x (*, normalized_shape); weight normalized_shape or undefined.
variable_list layer_norm_backward_recorded(const Tensor& g, const Tensor& x,
                                           const IntList& normalized_shape, const Tensor& weight,
                                           double eps, NormGrads need);

}  // namespace lockstep::autograd
