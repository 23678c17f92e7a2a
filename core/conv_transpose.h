// core/conv_transpose.h — conv_transpose2d, the gradient of conv2d with respect
// to its input used as a layer (DCGAN's generator, decoders).
//
//   input (N, C_in, H, W), weight (C_in, C_out / groups, kH, kW) (PyTorch's
//   transposed layout), bias (C_out) or undefined -> (N, C_out, H', W') with
//   H' = (H - 1) stride - 2 padding + dilation (kH - 1) + output_padding + 1.
// output_padding (< stride or < dilation, per dim) adds rows and columns at the
// bottom and right that only the bias reaches. Computed by conv2d's backward
// kernels (core/native/nn_kernels.h), on the CPU and on CUDA alike:
//   forward   y  = conv2d's input gradient for grad_output x
//   backward  dx = conv2d(g, weight)   dw = conv2d's weight gradient with input g
//             and grad_output x        db = g summed over (N, H', W')
// Defined in autograd/functions/conv_transpose.cpp.
// Read before: core/nn_ops.h (conv2d). Read next: nn/conv_transpose.h.
#pragma once

#include "core/tensor.h"

namespace lockstep {

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const IntList& stride = {1, 1}, const IntList& padding = {0, 0},
                        const IntList& output_padding = {0, 0}, int64_t groups = 1,
                        const IntList& dilation = {1, 1});

}  // namespace lockstep
