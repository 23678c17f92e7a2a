// core/native/conv_folded_gemm.h — the backward-weights pass of convolutions
// with small outputs as one GEMM over the whole batch, where that beats
// oneDNN's direct kernel (conv_onednn.cpp asks here, after the 1x1 GEMMs).
//
// Note [Convolutions as batch-folded GEMMs]
// A convolution's backward-weights is a sum of one GEMM per image (Note
// [Convolution as a matrix product] in conv.cpp), gw += G_n . cols_n^T, each
// over P = oH oW output pixels. Folding the batch into one GEMM,
//   cols (K, N P)     cols[:, n P + j] = im2col(x_n)[:, j]
//   gyc (C_out, N P)  the channel-major copy of gy (N, C_out, P)
//   gw (C_out, K)     = gyc . cols^T
// gives one GEMM with N P = 392 at ResNet50's 7x7 stage (batch 8), which runs
// near the machine's GEMM rate. Measured (thread CPU time, 1 thread, median of
// 7, a throwaway program calling native::conv2d_backward, session 5):
//   3x3 512->512, stride 2, 14x14 -> 7x7   oneDNN blocked 19.3-20.5 ms, folded 14.6-14.8
//   3x3 512->512, stride 1, 7x7            16.0-19.9 against 16.0-16.2 (noise)
//   3x3 256->256, stride 2, 28x28 -> 14x14 15.7-17.4 against 16.9-17.0 (not taken)
//   3x3 128->128, stride 2, 56x56 -> 28x28 16.3-17.1 against 21.8-22.1 (not taken)
// The forward and backward-data were tried the same way and lost to oneDNN
// (3x3 512 at 7x7: 16.2 and 17.9 ms against 13.1 and 12.8 in the step), so they
// stay with the primitives. Here: ungrouped float32 convolutions without bias,
// with at least 16 input channels (the stem's 3-channel 7x7 would need a 59 MB
// cols) and fewer than kFoldPixels = 196 output pixels per image, except the
// 1x1 ones (Note [1x1 convolutions as GEMMs] folds those without im2col).
// The columns cost K N P floats of scratch (7.2 MB for ResNet50's 3x3 512
// layers at batch 8).
//
// Read before: core/native/conv_columns.h, core/native/conv_1x1_gemm.h.
// Read next: core/native/conv_onednn.cpp.
#pragma once

#include "core/native/conv_geometry.h"

namespace lockstep::native {

// gw (C_out, C_in, kH, kW) = the weight gradient of `g` from gy (N, C_out, oH, oW)
// and x (N, C_in, H, W), when the rule above takes `g` and no bias gradient is
// wanted (gb null): true. Otherwise writes nothing and returns false.
// Whether conv_folded_gemm_backward_weights takes `g` (with a bias gradient when `bias`).
bool conv_folded_gemm_takes_weights(const ConvGeometry& g, bool bias);

bool conv_folded_gemm_backward_weights(const ConvGeometry& g, const float* gy, const float* x,
                                       float* gw, const float* gb);

}  // namespace lockstep::native
