// core/native/batch_norm_pair.h — relu(batch_norm(x) + batch_norm(r)) as one kernel:
// the end of a ResNet block whose residual is a downsample (conv + batch norm).
//
//   forward   x, r (N, C, *); each batch norm's weight, bias, running_mean,
//             running_var (C) -> output (N, C, *), each one's save_mean, save_invstd (C)
//   backward  grad_output; x, r; each one's weight, save_mean, save_invstd; the ReLU's
//             mask (the output, or the forward's bits) -> the six gradients of x,
//             weight, bias, r, r's weight, r's bias
// What it saves and why: Note [Downsample batch norm folded] in
// fast/batch_norm_bf16_nhwc_pair.cpp. Channels-last bfloat16 CPU inputs take that
// kernel; every other input (and LOCKSTEP_BF16_BN_PAIR=0) the reference, batch_norm
// then batch_norm_add_relu, and their backwards in turn (batch_norm_pair.cpp).
//
// Read before: core/native/fused_relu.h. Read next: core/native/batch_norm_pair.cpp.
#pragma once

#include <array>

#include "core/tensor.h"

namespace lockstep::native {

// One batch norm's tensors; weight, bias and the running statistics may be undefined.
struct BatchNormTensors {
  Tensor weight, bias, running_mean, running_var;
};

struct BatchNormPairForward {
  Tensor output;                                    // (N, C, *)
  Tensor save_mean, save_invstd;                    // (C): x's batch norm
  Tensor residual_save_mean, residual_save_invstd;  // (C): r's
};

// Undefined where not asked for.
struct BatchNormPairGrads {
  Tensor grad_input, grad_weight, grad_bias;                       // x's batch norm
  Tensor grad_residual, grad_residual_weight, grad_residual_bias;  // r's
};

// relu(batch_norm(input; bn) + batch_norm(residual; residual_bn)); residual has the
// input's shape, dtype and device; both batch norms share training, momentum, eps.
// relu_bits not null: set to the ReLU's mask as bits where the fast kernel ran
// (Note [ReLU mask in bits] in autograd/functions/batch_norm.cpp), else undefined
// (then the output is the mask, as for batch_norm_add_relu_forward).
BatchNormPairForward batch_norm_pair_forward(const Tensor& input, const BatchNormTensors& bn,
                                             const Tensor& residual,
                                             const BatchNormTensors& residual_bn, bool training,
                                             double momentum, double eps,
                                             Tensor* relu_bits = nullptr);

// The backward of batch_norm_pair_forward. mask_source: the forward's relu_bits when
// it set them, else its output. need: which of the six gradients (BatchNormPairGrads'
// order) to compute.
BatchNormPairGrads batch_norm_pair_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& save_mean,
    const Tensor& save_invstd, const Tensor& residual, const Tensor& residual_weight,
    const Tensor& residual_save_mean, const Tensor& residual_save_invstd, const Tensor& mask_source,
    bool mask_in_bits, bool training, const std::array<bool, 6>& need);

}  // namespace lockstep::native
