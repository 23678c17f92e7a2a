// nn/functional.h — ls::nn::functional: the stateless form of the layers, with
// PyTorch's names and defaults. Each forwards to the op in core/tensor.h or
// core/nn_ops.h.
// Read before: core/nn_ops.h. Read next: nn/linear.h and the other layers.
#pragma once

#include "core/nn_ops.h"
#include "core/tensor.h"

namespace lockstep::nn::functional {

inline Tensor relu(const Tensor& x) { return x.relu(); }
inline Tensor gelu(const Tensor& x) { return x.gelu(); }
inline Tensor softmax(const Tensor& x, int64_t dim) { return x.softmax(dim); }
inline Tensor log_softmax(const Tensor& x, int64_t dim) { return x.log_softmax(dim); }
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
