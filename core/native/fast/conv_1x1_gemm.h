// core/native/fast/conv_1x1_gemm.h — 1x1 convolutions computed as GEMMs, for the
// passes where that beats oneDNN's primitives (conv_onednn.cpp asks first).
//
// § Note [1x1 convolutions as GEMMs]
// A 1x1, unpadded, ungrouped convolution is a matrix product per image:
//   forward          y_n (C_out, P)    = w (C_out, C_in) . xs_n (C_in, P)
//   backward-data    gxs_n (C_in, P)   = w^T . gy_n (C_out, P)
//   backward-weights gw (C_out, C_in)  = sum_n gy_n . xs_n^T
// with P = oH oW and xs = x[:, :, ::stride_h, ::stride_w] (x itself at stride 1).
// Why each case goes here (the measurements, ResNet50 at batch 8 on one thread,
// and how to re-measure them: docs/results/kernel_choices.md):
// - stride 1: oneDNN's plain backward-data primitive ran at under half its
//   forward's speed, and native::gemm (dnnl_sgemm) does that pass about as fast
//   as the forward. Forward and backward-weights keep the plain primitive, which
//   is already this GEMM. ResNet50 has 33 such layers (conv1 and conv3 of every
//   block, layer1.0.downsample).
// - stride > 1 (ResNet's downsample, stride 2): the blocked primitives ran well
//   below the stride-1 layers' rate, mostly reordering the full-size image; here
//   every pass is the GEMMs above over xs, gathered into a scratch tensor
//   (backward-data scatters gxs into a zeroed gx).
// - small outputs (P < kFoldPixels = 196, ResNet's 7x7 stage): one GEMM per image
//   has only P = 49 columns, too few for a GEMM to run at its rate (oneDNN's plain
//   primitive and native::gemm alike). There the batch is folded into the GEMM:
//   with the image stored channel-major, xc (C_in, N P) with xc[c, n P + j] = xs[n, c, j],
//     forward          yc (C_out, N P) = w . xc            then y = yc transposed back
//     backward-data    gxc (C_in, N P) = w^T . gyc         then scattered into gx
//     backward-weights gw (C_out, C_in) = gyc . xc^T
//   (gyc likewise from gy): three GEMMs with N P = 392 columns at batch 8, plus
//   copies of P-runs that cost a few percent of the GEMMs, faster than per-image
//   GEMMs and than the blocked primitives (which reorder the weights every pass).
//   Every stride takes this path below kFoldPixels.
// Passes with a bias keep the primitives. float32 only, like conv_onednn.
//
// Read before: core/native/conv_geometry.h, core/native/gemm.h.
// Read next: core/native/fast/conv_onednn.cpp.
#pragma once

#include <memory>

#include "core/native/conv_geometry.h"
#include "core/native/fast/conv_onednn.h"

namespace lockstep::native {

// Whether `pass` of `g` (with a bias when `bias`) is done here: backward-data for
// every 1x1 geometry; forward and backward-weights without bias for the strided
// ones and those with fewer than kFoldPixels output pixels. One of choose_conv's
// rules (conv_dispatch.cpp).
bool conv1x1_gemm_takes(const ConvGeometry& g, ConvPass pass, bool bias);
// Whether those passes fold the batch into one GEMM (an output under kFoldPixels).
bool conv1x1_gemm_folds(const ConvGeometry& g);

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
