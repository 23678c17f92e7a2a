// core/native/conv_geometry.h — every size of one 2-d convolution, checked once.
//
// conv2d_forward / conv2d_backward (conv.cpp) build a ConvGeometry from their
// arguments; both convolution paths read it: the im2col + GEMM reference in
// conv.cpp and the oneDNN path in fast/conv_onednn.cpp (see Note [Convolution
// backends] in fast/conv_onednn.h).
//
// Read before: core/native/nn_kernels.h. Read next: core/native/conv.cpp.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace lockstep::native {

// See Note [Convolution as a matrix product] in conv.cpp for k() and p().
struct ConvGeometry {
  int64_t n, c_in, h, w;  // input (N, C_in, H, W)
  int64_t c_out, kh, kw;  // weight (C_out, C_in / groups, kH, kW)
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
  int64_t oh, ow;  // output (N, C_out, oH, oW)

  int64_t c_in_g() const { return c_in / groups; }
  int64_t c_out_g() const { return c_out / groups; }
  int64_t k() const { return c_in_g() * kh * kw; }  // rows of cols
  int64_t p() const { return oh * ow; }             // columns of cols
  bool is_pointwise() const {
    return kh == 1 && kw == 1 && stride_h == 1 && stride_w == 1 && pad_h == 0 && pad_w == 0;
  }
};

// Checks conv2d's arguments (ranks, dtypes, channel counts against groups,
// positive strides and dilations, an input large enough for the kernel) and
// computes the geometry; `op` names the caller in every error. Defined in conv.cpp.
ConvGeometry make_conv_geometry(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                const IntList& stride, const IntList& padding,
                                const IntList& dilation, int64_t groups, const char* op);

}  // namespace lockstep::native
