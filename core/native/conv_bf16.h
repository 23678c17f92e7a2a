// core/native/conv_bf16.h — 2-d convolution on bfloat16 data with float32 accumulation.
//
// The kernels behind conv2d under autocast (Note [Autocast policy] in
// core/autocast.h). Operands are tensors of the shapes in conv_geometry.h:
//   forward           x (N, C_in, H, W) bf16, w (C_out, C_in / groups, kH, kW) bf16,
//                     bias (C_out) float32 or undefined  ->  y (N, C_out, oH, oW) bf16
//   backward          gy (N, C_out, oH, oW) bf16  ->  gx (N, C_in, H, W) in `gx_dtype`
//                     (the dtype the op's input had), gw float32, gb float32
// The weight and bias gradients are accumulated and returned in float32 (they
// go to float32 master weights); gx is rounded once, to gx_dtype.
//
// Two backends, chosen by conv_backend() (nn_kernels.h):
//   Reference  the operands converted to float32, the float32 reference
//              convolution (im2col + GEMM, conv.cpp), y rounded to bf16: the definition;
//   OneDNN     oneDNN's bf16 convolution primitives (brgconv / jit on AMX tiles
//              here), each pass in the layouts its primitive prefers
//              (format_tag::any), reordered from and to plain NCHW at the edges.
//              Primitives are cached per geometry and pass.
//
// Read before: core/native/conv_geometry.h, core/native/onednn_engine.h.
// Read next: autograd/functions/autocast_ops.cpp.
#pragma once

#include <string>
#include <tuple>

#include "core/native/conv_geometry.h"

namespace lockstep::native {

Tensor conv2d_bf16_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                           const Tensor& bias);

std::tuple<Tensor, Tensor, Tensor> conv2d_bf16_backward(const ConvGeometry& g, const Tensor& gy,
                                                        const Tensor& x, const Tensor& w,
                                                        ScalarType gx_dtype, bool need_input,
                                                        bool need_weight, bool need_bias);

// The oneDNN implementation the forward of `g` runs, e.g. "brgconv:avx512_core_amx_bf16".
std::string conv2d_bf16_impl(const ConvGeometry& g);

}  // namespace lockstep::native
