// core/native/conv_dispatch.h — which implementation runs each pass of a 2-d
// convolution on the CPU, chosen in one place (Note [Kernel dispatch] in
// dispatch_verbose.h; the rules themselves are the one screen of conv_dispatch.cpp).
//
// conv2d_forward / conv2d_backward (conv.cpp) and the autocast kernels
// conv2d_bf16_forward / conv2d_bf16_backward (conv_bf16.cpp) call choose_conv
// or choose_conv_bf16 once per pass and run the implementation it names.
// CUDA tensors never get here: they go to cuDNN (core/cuda/conv_cudnn.cpp)
// through LS_DISPATCH_CUDA (Note [CUDA dispatch] in cuda_dispatch.h).
//
// Read before: core/native/conv_geometry.h, core/native/dispatch_verbose.h.
// Read next: core/native/conv_dispatch.cpp, core/native/conv.cpp.
#pragma once

#include <string>

#include "core/native/conv_geometry.h"

namespace lockstep::native {

// The three passes of a convolution; oneDNN builds one primitive for each.
enum class ConvPass { Forward, BackwardData, BackwardWeights };
const char* conv_pass_name(ConvPass pass);  // "forward", "backward_data", "backward_weights"
// The shapes of a dispatch line (Note [Kernel dispatch]), CPU and cuDNN alike:
// "x (N, C_in, H, W) w (C_out, C_in_g, kH, kW) stride 1x1 padding 1x1 dilation 1x1 groups 1".
std::string conv_shapes(const ConvGeometry& g, bool bias);

// Every implementation of a convolution pass on the CPU, with the file that runs it.
enum class ConvImpl {
  // float32 and float64
  Im2colGemm,     // conv.cpp: im2col + native::gemm (Note [Convolution as a matrix product])
  Gemm1x1,        // fast/conv_1x1_gemm.cpp: a 1x1 layer as one GEMM per image
  Gemm1x1Folded,  // fast/conv_1x1_gemm.cpp: a 1x1 layer with a small output, batch in one GEMM
  Im2rowFolded,   // fast/conv_folded_gemm.cpp: an output under 16 pixels, batch in one GEMM
  OneDNN,         // fast/conv_onednn*.cpp: a cached oneDNN primitive (direct or Winograd)
  // bfloat16 (the autocast kernels of conv_bf16.h)
  Bf16ViaFloat32,          // conv_bf16.cpp: converted to float32, the float32 convolution, rounded
  Bf16Gemm1x1,             // fast/conv_bf16_pointwise.cpp: 1x1 layers as AMX GEMMs
  Bf16Direct,              // fast/conv_bf16_direct*.cpp: first layers over 1-3 channels
  Bf16InputGradAsForward,  // fast/conv_bf16_input_grad.cpp: dx as forward convolutions of dy
  Bf16WeightGradGemm,      // fast/conv_bf16_weight_grad.cpp: dW as one GEMM over the batch
  Bf16OneDNN,              // conv_bf16.cpp: oneDNN's bf16 primitives
};
// "im2col_gemm", "gemm_1x1", "gemm_1x1_folded", "im2row_folded", "onednn", ...
const char* conv_impl_name(ConvImpl impl);

// The implementation of `pass` for a float32 or float64 convolution `g`; `bias`:
// the forward adds one, or the backward-weights pass also computes its gradient
// (which otherwise conv.cpp sums from grad_output). Under LOCKSTEP_VERBOSE=dispatch
// prints the choice (Note [Kernel dispatch]).
ConvImpl choose_conv(const ConvGeometry& g, ScalarType dtype, ConvPass pass, bool bias);

// The same for the bfloat16 kernels. The backward-data choice also depends on
// grad_output (its memory order) and the input gradient's dtype; other passes
// ignore them.
ConvImpl choose_conv_bf16(const ConvGeometry& g, ConvPass pass, const Tensor& grad_output = {},
                          ScalarType grad_input_dtype = kBFloat16);

// choose_conv_bf16's first rule: the layer's every pass runs bf16_gemm_1x1.
bool conv_bf16_runs_pointwise_gemm(const ConvGeometry& g);

// Its second: every other bf16 pass runs bf16_via_float32 (the Reference backend,
// or a CPU where oneDNN has no bf16 kernels).
bool conv_bf16_runs_via_float32();

}  // namespace lockstep::native
