// autograd/functions/conv_recorded.h — the weight gradient of a convolution as
// recording ops, shared by Conv2dBackward and ConvTranspose2dBackward in a
// backward with create_graph (Note [Double backward] in autograd/double_backward.h).
//
// For out = conv2d(input, W) (stride s, padding p, dilation d, groups G), with
// gout = dL/dout (N, C_out, H', W'):
//   dW[o][i][a][b] = sum over n, y, x of gout[n][o][y][x] input[n][i][y s + a d - p][x s + b d - p],
// which is itself a convolution: conv2d(input^T, gout^T) with stride and dilation
// swapped (input^T = input.transpose(0, 1), (C_in, N, H, W), the batch taking the
// place of the channels), transposed back and cropped to the kernel (rows a
// stride skipped make it larger). With groups, group j pairs input channels
// [j C_in/G, (j+1) C_in/G) with output channels [j C_out/G, (j+1) C_out/G), and
// the groups' gradients are concatenated along dim 0.
// conv_transpose2d(x, W) is conv2d's input gradient, so its weight gradient is
// this with input = its gout and gout = its x (the roles of the two swap).
//
// Read before: autograd/functions/conv.cpp. Read next: autograd/functions/conv_transpose.cpp.
#pragma once

#include "core/tensor.h"

namespace lockstep::autograd {

// dL/dW (C_out, C_in / groups, kH, kW) of out = conv2d(input, W), recorded; defined in conv.cpp.
Tensor conv2d_weight_grad_recorded(const Tensor& input, const Tensor& grad_out, int64_t kH, int64_t kW,
                                   const IntList& stride, const IntList& padding,
                                   const IntList& dilation, int64_t groups);

}  // namespace lockstep::autograd
