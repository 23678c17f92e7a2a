// core/native/batch_norm_relu_pool.h — max_pool2d(relu(batch_norm(x))) as one kernel:
// the stem of a ResNet (bn1, relu, maxpool).
//
//   forward   x (N, C, H, W); the batch norm's weight, bias, running_mean, running_var (C);
//             the pool's window -> output (N, C, oH, oW), save_mean, save_invstd (C), and
//             where each output's maximum came from (argmax)
//   backward  grad_output (N, C, oH, oW); x, weight, bias, save_mean, save_invstd, argmax
//             -> the gradients of x, weight and bias
// Channels-last bfloat16 CPU inputs whose windows hold at most 255 elements take the kernel
// of fast/batch_norm_relu_pool_bf16_nhwc.cpp (Note [Stem batch norm, ReLU and max-pool in
// one pass] there), which never writes the batch norm's output or its gradient; its argmax
// is each output's offset in its window, one byte, (N oH oW, C) uint8. Every other input,
// and every input when LOCKSTEP_BF16_BN_POOL=0, runs the reference: batch_norm_relu, then
// max_pool2d, and their backwards in turn (batch_norm_relu_pool.cpp); its argmax is
// max_pool2d's int64 indices. Backward runs the kernel whose argmax it is given.
//
// Read before: core/native/batch_norm_pair.h (BatchNormTensors), core/native/pool_rules.h.
// Read next: core/native/batch_norm_relu_pool.cpp.
#pragma once

#include <array>

#include "core/native/batch_norm_pair.h"
#include "core/native/pool_rules.h"
#include "core/tensor.h"

namespace lockstep::native {

struct BatchNormReluPoolForward {
  Tensor output;                  // (N, C, oH, oW)
  Tensor save_mean, save_invstd;  // (C)
  Tensor argmax;                  // (N oH oW, C) uint8 window offsets, or int64 indices
};

// max_pool2d(relu(batch_norm(input; bn)), kernel_size, stride, padding); an empty stride
// means the kernel size, as max_pool2d's.
BatchNormReluPoolForward batch_norm_relu_max_pool2d_forward(
    const Tensor& input, const BatchNormTensors& bn, bool training, double momentum, double eps,
    const IntList& kernel_size, const IntList& stride, const IntList& padding);

// The backward of batch_norm_relu_max_pool2d_forward, given the forward's argmax and its
// pool parameters. need: which of (input, weight, bias) to compute; undefined otherwise.
std::array<Tensor, 3> batch_norm_relu_max_pool2d_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& bias,
    const Tensor& save_mean, const Tensor& save_invstd, const Tensor& argmax,
    const IntList& kernel_size, const IntList& stride, const IntList& padding, bool training,
    const std::array<bool, 3>& need);

namespace detail {

// The channels-last bfloat16 kernel (fast/batch_norm_relu_pool_bf16_nhwc.cpp), after
// batch_norm_relu_pool.cpp's checks; p: the pool's window over this input.
BatchNormReluPoolForward batch_norm_relu_pool_bf16_nhwc_forward(const Tensor& input,
                                                                const BatchNormTensors& bn,
                                                                bool training, double momentum,
                                                                double eps,
                                                                const rules::PoolWindow& p);
std::array<Tensor, 3> batch_norm_relu_pool_bf16_nhwc_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& bias,
    const Tensor& save_mean, const Tensor& save_invstd, const Tensor& offsets,
    const rules::PoolWindow& p, bool training, const std::array<bool, 3>& need);

}  // namespace detail

}  // namespace lockstep::native
