// core/native/fast/conv_folded_gemm.h — convolutions with tiny outputs (fewer
// than 16 pixels per image) computed as three GEMMs over the whole batch, for
// the passes where that beats oneDNN's direct primitives (conv_dispatch.cpp asks
// here after the 1x1 GEMMs and before oneDNN).
//
// § Note [Small-output convolutions as batch-folded GEMMs]
// oneDNN's direct kernels block over the output row: with an output of 3x3 or
// 1x1 pixels they keep few accumulators busy. DCGAN's discriminator layer
// 128->256 (4x4, stride 2, 7x7 -> 3x3, batch 64) ran at 75-100 GFLOP/s (forward
// 8.3 ms, backward-data 6.1, backward-weights 7.5, one thread, DNNL_VERBOSE),
// where dnnl_sgemm runs the same products at 150-175 GFLOP/s. So below
// kFoldMaxPixels output pixels the batch is folded into one GEMM per pass. With
// P = oH oW, K = C_in kH kW, and every window of the batch copied into one row of
//     rows (N P, K):  rows[n P + (oy, ox), (c, ki, kj)] = x[n, c, oy sh - ph + ki dh, ox sw - pw + kj dw]
// ("im2row": Note [Convolution as a matrix product] in conv.cpp with the batch
// folded in and the matrix transposed, so that each window is written as
// contiguous runs of kW values), and gyc (C_out, N P) the gradient channel-major:
//     forward          yc (C_out, N P)   = w (C_out, K) . rows^T     then y = yc transposed back
//     backward-data    drows (N P, K)    = gyc^T . w                 then gx = row2im(drows)
//     backward-weights gw (C_out, K)     = gyc . rows
// The weights are read as stored (OIHW is (C_out, K) row-major): no weight
// reorder, no blocked activations. The forward keeps `rows` in its workspace
// (Note [Convolution workspace] in conv_onednn.h), so backward-weights is one
// GEMM. Timed in isolation on the DCGAN layer above (the same loops and
// dnnl_sgemm calls, batch 64, one thread, best of 5): im2row 1.6 ms, each GEMM
// 3.6-4.1 ms, row2im 1.2 ms, the transposes 0.06 ms; in the profile of the
// training step (LOCKSTEP_PROFILE=1 build/bin/dcgan --steps 40 --threads 1) its
// passes went from 8.5, 6.6 and 7.7 ms (primitive and reorders) to 6.0, 5.5 and
// 4.0 (docs/results/examples.md). At 4x4 outputs (P = 16; DCGAN's generator
// 256->128, 3x3 stride 2) the primitives were as fast or faster (forward 2.9 ms
// against 5.6 timed so), and at 7x7 (P = 49) clearly faster, so the rule stops
// below 16 pixels; ResNet50 at 224 and the Fashion-MNIST CNN never fold.
// The cost is memory: rows hold oH oW kH kW / (H W) times the input's values,
// about kH kW / (sH sW) (2.9x for DCGAN's layer: 4.7 MB at batch 64), from
// forward to backward. Layers with fewer than 16 output channels
// (kFoldMinOutChannels; a discriminator's last 256->1 layer) keep the
// primitives: their GEMMs are too thin to pay for im2row.
// Ungrouped, bias-free passes only (a pass with a bias keeps the primitives);
// float32 only, like conv_onednn. Tested against the reference backend
// (tests/core/test_conv_folded_gemm.cpp).
//
// Read before: core/native/fast/conv_1x1_gemm.h, core/native/conv_columns.h.
// Read next: core/native/fast/conv_onednn.cpp.
#pragma once

#include <memory>

#include "core/native/conv_geometry.h"
#include "core/native/fast/conv_onednn.h"

namespace lockstep::native {

// Whether `pass` of `g` (with a bias when `bias`) is done here: an ungrouped
// layer without bias, with fewer than kFoldMaxPixels output pixels, at least
// kFoldMinOutChannels output channels and no 1x1 GEMM taking it (Note [1x1
// convolutions as GEMMs]). One of choose_conv's rules (conv_dispatch.cpp).
bool conv_folded_gemm_takes(const ConvGeometry& g, ConvPass pass, bool bias);

// y (N, C_out, oH, oW) = conv(x, w) when conv_folded_gemm_takes the forward:
// true; false leaves the pass to the caller, having written nothing. With
// `workspace` not null, the rows it built are left there for backward-weights.
bool conv_folded_gemm_forward(const ConvGeometry& g, const float* x, const float* w, float* y,
                              std::shared_ptr<const ConvWorkspace>* workspace = nullptr);

// The backward passes done here (gx, gw null when not wanted, each done only if
// conv_folded_gemm_takes it); with sum_gx the input gradient is added into gx
// (Note [Convolution gradients summed in place] in conv_onednn.h). Backward-weights
// reads the forward's rows from `workspace` when it holds rows of this geometry.
ConvBackwardDone conv_folded_gemm_backward(const ConvGeometry& g, const float* gy, const float* x,
                                           const float* w, float* gx, float* gw, bool sum_gx,
                                           const ConvWorkspace* workspace = nullptr);

}  // namespace lockstep::native
