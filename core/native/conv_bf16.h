// core/native/conv_bf16.h — 2-d convolution on bfloat16 data with float32 accumulation.
//
// The kernels behind conv2d under autocast (Note [Autocast policy] in
// core/autocast.h). Operands are tensors of the shapes in conv_geometry.h:
//   forward           x (N, C_in, H, W) bf16 or f32, w (C_out, C_in / groups, kH, kW) bf16,
//                     bias (C_out) float32 or undefined  ->  y (N, C_out, oH, oW) bf16
//   backward          gy (N, C_out, oH, oW) bf16  ->  gx (N, C_in, H, W) in `gx_dtype`
//                     (the dtype the op's input had), gw float32, gb float32
// The weight and bias gradients are accumulated and returned in float32 (they
// go to float32 master weights); gx is rounded once, to gx_dtype.
//
// Two backends, chosen by conv_backend() (nn_kernels.h):
//   Reference  the operands converted to float32, the float32 reference
//              convolution (im2col + GEMM, conv.cpp), y rounded to bf16: the definition;
//   OneDNN     1x1 layers as AMX GEMMs (conv_bf16_pointwise.cpp); layers over
//              one to three channels as direct loops (conv_bf16_direct.cpp); the others on
//              oneDNN's bf16 convolution primitives (brgconv / jit on AMX tiles
//              here), each pass in the layouts its primitive prefers
//              (format_tag::any), reordered from and to our NCHW or
//              channels-last tensors at the edges only where the two differ.
//              Primitives are cached per geometry and pass.
//
// Read before: core/native/conv_geometry.h, core/native/fast/onednn_engine.h.
// Read next: autograd/functions/autocast_ops.cpp.
#pragma once

#include <string>
#include <tuple>

#include "core/native/conv_geometry.h"

namespace lockstep::native {

// The forward's input as the backward-weights pass will read it: the bf16 image
// in the layout the forward primitive read (`bytes`, oneDNN's layout for this
// geometry), or a plain bf16 NCHW image (`plain`: the reference path, tests).
// Saving the reordered copy spares backward a conversion and a reorder, and it
// is private memory, so a later in-place change of the op's input cannot reach it.
// `plain` may be channels-last (Note [Channels-last activations] in memory_format.h).
// With `aliases_input` it is the caller's own input tensor, not a private copy: the
// autograd node then keeps it as a SavedVariable, whose version check refuses a
// backward after an in-place change (as PyTorch's convolution saves its input).
struct ConvBf16SavedInput {
  Tensor bytes;                // uint8, the forward primitive's source layout
  Tensor plain;                // bf16 (N, C_in, H, W), or its strided subsample when `subsampled`
  bool subsampled = false;     // plain is (N, C_in, oH, oW): a strided 1x1 layer's GEMM operand
  bool aliases_input = false;  // plain is the forward's input x itself
};

// Which order the bf16 convolutions return (Note [Channels-last activations] in
// memory_format.h). They take inputs and gradients in either order and return
//   forward   y channels-last when x is stored channels-last, or when x is an image
//             of at most kImageChannels channels (a network's first layer, which
//             reads NCHW images from the data loader: its output starts the
//             channels-last chain); otherwise NCHW, so a network of NCHW
//             activations stays NCHW;
//   backward  dx in dy's order (dw and db are float32 (C_out, C_in, kH, kW), (C_out)).
// The direct first-layer loops (conv_bf16_is_direct) follow the same rule: a small
// CNN's first layer starts its chain too (Note [bf16 direct convolution,
// channels-last output] in fast/conv_bf16_direct.cpp).
// LOCKSTEP_BF16_CHANNELS_LAST=0 makes every forward return NCHW (A/B runs).
inline constexpr int64_t kImageChannels = 4;
bool conv_bf16_channels_last();  // the switch: LOCKSTEP_BF16_CHANNELS_LAST, default on
bool conv_bf16_returns_channels_last(const ConvGeometry& g, const Tensor& x);

// x may be float32 or bfloat16: it is converted and reordered in one pass.
// With `saved` not null, also fills it for conv2d_bf16_backward.
Tensor conv2d_bf16_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                           const Tensor& bias, ConvBf16SavedInput* saved = nullptr);

// With `sum_into` defined (conv_bf16_can_sum_into must hold), dx is added into it
// and returned as it: Note [bf16 convolution gradients summed in place].
std::tuple<Tensor, Tensor, Tensor> conv2d_bf16_backward(const ConvGeometry& g, const Tensor& gy,
                                                        const ConvBf16SavedInput& x,
                                                        const Tensor& w, ScalarType gx_dtype,
                                                        bool need_input, bool need_weight,
                                                        bool need_bias,
                                                        const Tensor& sum_into = Tensor());

// § Note [bf16 convolution gradients summed in place]
// The engine may hand a convolution the gradient already waiting for its input
// (Note [Gradients summed in place], autograd/engine.cpp): ResNet's block input
// feeds the block's first 1x1 layer and the shortcut. A stride-1 1x1 layer on
// channels-last activations computes dx as one GEMM (fast/conv_bf16_pointwise.cpp),
// which then runs with beta = 1 into the waiting tensor: dx + pending summed in
// float32 and rounded once, instead of dx rounded, then a separate pass over both
// tensors. True when that path applies: the layer, gy channels-last, `sum` a
// channels-last CPU tensor of dx's shape in gx_dtype.
bool conv_bf16_can_sum_into(const ConvGeometry& g, const Tensor& gy, const Tensor& sum,
                            ScalarType gx_dtype);

// The 1x1 layers that run as GEMMs on NCHW images instead of oneDNN convolutions
// (Note [bf16 1x1 convolutions as GEMMs] in conv_bf16_pointwise.cpp), and their passes.
bool conv_bf16_is_pointwise_gemm(const ConvGeometry& g);
Tensor conv2d_bf16_pointwise_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                                     const Tensor& bias, ConvBf16SavedInput* saved);
std::tuple<Tensor, Tensor, Tensor> conv2d_bf16_pointwise_backward(
    const ConvGeometry& g, const Tensor& gy, const ConvBf16SavedInput& x, const Tensor& w,
    ScalarType gx_dtype, bool need_input, bool need_weight, bool need_bias,
    const Tensor& sum_into = Tensor());

// The first layers over one to three channels (C_in kH kW <= 27, stride 1), run
// as direct float32 loops on NCHW planes (Note [bf16 direct convolution for few
// input channels] in fast/conv_bf16_direct.cpp), and their passes.
bool conv_bf16_is_direct(const ConvGeometry& g);
Tensor conv2d_bf16_direct_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                                  const Tensor& bias, ConvBf16SavedInput* saved);
std::tuple<Tensor, Tensor, Tensor> conv2d_bf16_direct_backward(
    const ConvGeometry& g, const Tensor& gy, const ConvBf16SavedInput& x, const Tensor& w,
    ScalarType gx_dtype, bool need_input, bool need_weight, bool need_bias);

// The layers whose input gradient is made of forward convolutions of dy, one per
// stride phase (Note [bf16 input gradient as a forward convolution] in
// fast/conv_bf16_input_grad.cpp),
// and that gradient, bf16 in dy's order.
bool conv_bf16_input_grad_as_forward(const ConvGeometry& g, const Tensor& gy, ScalarType gx_dtype);
Tensor conv2d_bf16_input_grad_as_forward(const ConvGeometry& g, const Tensor& gy, const Tensor& w);

// A (N, C, P) bf16 buffer as a contiguous (C, N P) tensor: row c holds image 0's
// P values of channel c, then image 1's, ... (the K-major operand of a GEMM
// summing over the whole batch).
Tensor conv_bf16_channels_major(const BFloat16* src, int64_t n, int64_t c, int64_t p);

// The non-1x1 layers whose weight gradient is one GEMM over the batch instead of
// oneDNN's backward-weights primitive (Note [bf16 backward-weights as one GEMM]
// in fast/conv_bf16_weight_grad.cpp): dW (C_out, C_in, kH, kW) float32 from
// gy (N, C_out, oH, oW) and x (N, C_in, H, W), bf16, both contiguous or both
// channels-last; with
// grad_bias not null also the bias gradient (C_out) float32.
bool conv_bf16_weight_grad_as_gemm(const ConvGeometry& g);
Tensor conv2d_bf16_weight_grad_gemm(const ConvGeometry& g, const Tensor& gy, const Tensor& x,
                                    Tensor* grad_bias);

// The oneDNN implementation the forward of `g` runs, e.g. "brgconv:avx512_core_amx_bf16"
// ("none (...)" on a CPU where oneDNN has no bf16 kernels).
std::string conv2d_bf16_impl(const ConvGeometry& g);

}  // namespace lockstep::native
