// nn/functional.h — ls::nn::functional: the stateless form of the layers, with
// PyTorch's names and defaults. Each forwards to the op in core/tensor.h or
// core/nn_ops.h.
// Read before: core/nn_ops.h. Read next: nn/linear.h and the other layers.
#pragma once

#include "core/conv_transpose.h"
#include "core/losses.h"
#include "core/nn_ops.h"
#include "core/tensor.h"
#include "core/tensor_functions.h"

namespace lockstep::nn::functional {

// The same functions as ls::relu, ... (core/tensor_functions.h), not copies:
// an unqualified call that finds both is not ambiguous.
using lockstep::gelu;
using lockstep::log_softmax;
using lockstep::max_pool2d;
using lockstep::relu;
using lockstep::sigmoid;
using lockstep::softmax;
using lockstep::tanh;
// The losses of core/losses.h, with reduction (ls::kNone, ls::kSum, ls::kMean).
using lockstep::binary_cross_entropy;
using lockstep::binary_cross_entropy_with_logits;
using lockstep::nll_loss;
using lockstep::smooth_l1_loss;
using lockstep::conv_transpose2d;
inline Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor()) {
  return lockstep::linear(x, weight, bias);
}
inline Tensor dropout(const Tensor& x, double p = 0.5, bool training = true) {
  return lockstep::dropout(x, p, training);
}
inline Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                            int64_t ignore_index = -100) {
  return lockstep::cross_entropy(logits, target, ignore_index);
}
inline Tensor mse_loss(const Tensor& input, const Tensor& target) {
  return lockstep::mse_loss(input, target);
}

}  // namespace lockstep::nn::functional
