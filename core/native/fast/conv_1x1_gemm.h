// core/native/fast/conv_1x1_gemm.h — 1x1 convolutions computed as GEMMs, for the
// passes where that beats oneDNN's primitives (conv_onednn.cpp asks first).
//
// § Note [1x1 convolutions as GEMMs]
// A 1x1, unpadded, ungrouped convolution is a matrix product per image:
//   forward          y_n (C_out, P)    = w (C_out, C_in) . xs_n (C_in, P)
//   backward-data    gxs_n (C_in, P)   = w^T . gy_n (C_out, P)
//   backward-weights gw (C_out, C_in)  = sum_n gy_n . xs_n^T
// with P = oH oW and xs = x[:, :, ::stride_h, ::stride_w] (x itself at stride 1).
// Measured by thread CPU time, ResNet50 batch 8, 1 thread (bench numbers in
// docs/results/cpu_step.md, session 3):
// - stride 1: oneDNN's plain backward-data primitive ran at under half its
//   forward's speed (1x1 256->64 at 56x56: 16.8 ms against 6.6, the table in
//   conv_onednn.cpp), native::gemm (dnnl_sgemm) does it in ~7.6 ms. Forward and
//   backward-weights keep the plain primitive, which is already this GEMM.
//   ResNet50 has 33 such layers (conv1 and conv3 of every block, layer1.0.downsample).
// - stride > 1 (ResNet's downsample, stride 2): the blocked primitives ran at
//   ~90 GFLOP/s against ~130-150 for the stride-1 layers, mostly reordering the
//   full-size image; here every pass is the GEMMs above over xs, gathered into a
//   scratch tensor (backward-data scatters gxs into a zeroed gx).
// - small outputs (P < kFoldPixels = 196, ResNet's 7x7 stage): one GEMM per image
//   has only P = 49 columns and ran at 95-110 GFLOP/s (oneDNN's plain primitive
//   and native::gemm alike). There the batch is folded into the GEMM: with the
//   image stored channel-major, xc (C_in, N P) with xc[c, n P + j] = xs[n, c, j],
//     forward          yc (C_out, N P) = w . xc            then y = yc transposed back
//     backward-data    gxc (C_in, N P) = w^T . gyc         then scattered into gx
//     backward-weights gw (C_out, C_in) = gyc . xc^T
//   (gyc likewise from gy): three GEMMs with N P = 392 columns at batch 8, ~150
//   GFLOP/s, plus copies of P-runs that cost ~5% of the GEMMs. Measured by thread
//   CPU time, 1 thread: 2048->512 at 7x7 (batch 8) forward 7.5 -> 5.3 ms,
//   backward-data 8.8 -> 5.5 ms; the strided 1024->2048 14x14 -> 7x7 layer, which
//   the blocked primitives ran in 13.6 + 16.1 + 21.9 ms (weights reordered every
//   pass), likewise. Every stride takes this path below kFoldPixels.
// Passes with a bias keep the primitives. float32 only, like conv_onednn.
//
// Read before: core/native/conv_geometry.h, core/native/gemm.h.
// Read next: core/native/fast/conv_onednn.cpp.
#pragma once

#include <memory>

#include "core/native/conv_geometry.h"
#include "core/native/fast/conv_onednn.h"

namespace lockstep::native {

// y = conv(x, w) when the forward is done here (a 1x1 without bias that is strided
// or has fewer than kFoldPixels output pixels): true; false leaves the pass to the caller.
// With `workspace` not null, the image it gathered is left there for the
// backward-weights pass (Note [Convolution workspace] in conv_onednn.h).
bool conv1x1_gemm_forward(const ConvGeometry& g, const float* x, const float* w, const float* bias,
                          float* y, std::shared_ptr<const ConvWorkspace>* workspace = nullptr);

// The backward passes done here (gx, gw, gb null when not wanted): input for every
// 1x1 geometry, weight without bias for the ones whose forward is done here. The
// others are left to the caller. With sum_gx the input gradient is added into gx
// (the GEMM's beta = 1 at stride 1: Note [Convolution gradients summed in place]
// in conv_onednn.h) instead of overwriting it. The backward-weights pass reads the
// forward's gathered image from `workspace` when it holds one of the right shape.
ConvBackwardDone conv1x1_gemm_backward(const ConvGeometry& g, const float* gy, const float* x,
                                       const float* w, float* gx, float* gw, const float* gb,
                                       bool sum_gx, const ConvWorkspace* workspace = nullptr);

}  // namespace lockstep::native
