// core/losses.h — the losses beyond cross_entropy and mse_loss (core/nn_ops.h),
// each with PyTorch's `reduction`: kNone (one value per element), kSum, kMean
// (the default).
//
//   nll_loss(log_probs (N, C), target (N) int64)      -log_probs[i][target[i]]; targets equal to
//                                                     ignore_index count neither in the sum nor
//                                                     in the mean's count (PyTorch's rule)
//   binary_cross_entropy(p, y)                        -(y log p + (1 - y) log(1 - p)), each log
//                                                     clamped at -100 as in PyTorch; p in [0, 1]
//   binary_cross_entropy_with_logits(x, y)            the same with p = sigmoid(x), computed
//                                                     stably: max(x, 0) - x y + log(1 + e^-|x|)
//   smooth_l1_loss(x, y, beta = 1)                    0.5 d^2 / beta where |d| < beta, else
//                                                     |d| - 0.5 beta, with d = x - y
// Under bf16 autocast each computes in float32 and returns float32, as PyTorch's
// autocast lists them (Note [Autocast policy] in core/autocast.h).
// Defined in autograd/functions/loss_extra.cpp.
// Read before: core/nn_ops.h. Read next: nn/functional.h (the losses as libtorch spells them).
#pragma once

#include "core/tensor.h"

namespace lockstep {

enum class Reduction { None, Mean, Sum };
inline constexpr Reduction kNone = Reduction::None;  // libtorch: torch::kNone
inline constexpr Reduction kMean = Reduction::Mean;
inline constexpr Reduction kSum = Reduction::Sum;

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = kMean,
                int64_t ignore_index = -100);
// libtorch's argument order, nll_loss(input, target, weight, reduction), as in
// `torch::nll_loss(output, target, /*weight=*/{}, torch::Reduction::Sum)`. `weight`:
// undefined ({}) or one weight per class (C); row i's loss is scaled by
// weight[target[i]], and kMean divides by the sum of the kept rows' weights (PyTorch's rule).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight, Reduction reduction = kMean,
                int64_t ignore_index = -100);
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, Reduction reduction = kMean);
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        Reduction reduction = kMean);
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = kMean,
                      double beta = 1.0);

}  // namespace lockstep
