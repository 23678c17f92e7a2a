// core/native/fast/conv_onednn_layout.h — which memory layouts each oneDNN
// convolution pass runs with (or whether it goes to the reference), and why.
// Internal to core/native/fast/conv_onednn.cpp.
//
// § Note [oneDNN convolution layouts]
// Our tensors are plain NCHW at the API edge. oneDNN's fast direct kernels want
// "blocked" layouts (channels in blocks of 16, nChw16c, and matching blocked
// weights), its GEMM-based kernels take plain layouts. For each pass we pick one
// of three layout plans, or leave the pass to the reference (choose_layout
// below), and reorder the arguments whose layout differs from ours into scratch
// buffers, and the outputs back:
//   Plain       every argument plain: oneDNN's im2col + GEMM kernels, no reorders
//   Blocked     every argument format_tag::any: the primitive picks (blocked)
//   PlainImage  the image (src) plain, weights and dst any: the direct kernels
//               read an NCHW image with few channels as it is
// Measured on this project's machine (Xeon, AVX-512, 1 thread): median thread
// CPU ms over 11 reps, reorders included, every layer with each plan forced
// (bench/bench_conv's layers; "ref" is conv.cpp's im2col + GEMM):
//   layer (batch)                         plan        fwd  bwd-data  bwd-weights
//   F-MNIST conv1 1->32 3x3 28x28 (64)    ref         1.3     0.7       2.1
//                                         Plain       1.3     1.2       2.0
//                                         PlainImage  1.7      -        1.6
//                                         Blocked     2.0     4.5       1.3
//   F-MNIST conv2 32->64 3x3 14x14 (64)   ref         6.6     6.5       7.4
//                                         Plain       6.7     7.6       7.5
//                                         Blocked     3.9     3.9       3.8
//   ResNet stem 3->64 7x7 s2 224 (8)      ref        32.6    30.1      40.0
//                                         Plain      32.3    36.4      39.1
//                                         PlainImage 16.0      -       21.3
//                                         Blocked    16.7    76.8      22.4
//   ResNet 3x3 64->64 56x56 (8)           ref        19.0    21.5      22.5
//                                         Plain      22.8    31.1      30.4
//                                         Blocked    14.4    16.5      16.6
//   ResNet 1x1 256->64 56x56 (8)          ref         7.0    19.8       8.8
//                                         Plain       6.6    16.8       8.4
//                                         Blocked    12.3    20.1      16.2   (reorders dominate)
//   ResNet 3x3 512->512 7x7 (8)           ref        20.5    32.5      24.6
//                                         Plain      16.8    25.3      20.5
//                                         Blocked    12.4    12.9      19.7
// Hence (choose_layout): 1x1 stride-1 unpadded kernels run Plain (one GEMM over
// the image as stored), except their backward-data, which is a GEMM of ours
// (Note [1x1 convolutions as GEMMs] in conv_1x1_gemm.h, which also takes the
// strided 1x1 convolutions). Images with fewer than kFewChannels input channels:
// the forward runs PlainImage, or Plain when each output is a sum of fewer than
// kFewMacs products (memory-bound: reordering the output back costs more than
// the direct kernel saves); backward-data runs the reference (a blocked
// diff_src would pad 1 or 3 channels to 16, and the GEMM kernel is no faster);
// backward-weights runs PlainImage. Everything else runs Blocked. When a plan
// has only oneDNN's slow reference implementation ("ref:any"), Plain is tried,
// and if that is "ref" too the pass falls back to conv.cpp's im2col path.
// The blocked copies live in buffers of the call (Note [oneDNN scratch
// memory]); both backward passes share one reorder of grad_output.
//
// Read before: core/native/fast/conv_onednn.h. Read next: core/native/fast/conv_onednn.cpp.
#pragma once

#include <cstdint>

#include "core/native/conv_geometry.h"
#include "core/native/fast/conv_onednn.h"

namespace lockstep::native::onednn_detail {

// Below this many input channels the image stays NCHW, and below this many
// multiply-adds per output element (K = C_in_g kH kW) the forward runs Plain
// (Note [oneDNN convolution layouts]).
constexpr int64_t kFewChannels = 16;
constexpr int64_t kFewMacs = 32;

// Reference: no primitive, conv.cpp's im2col path runs the pass.
enum class Layout { Plain, Blocked, PlainImage, Reference };

inline const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::Plain: return "plain";
    case Layout::Blocked: return "blocked";
    case Layout::PlainImage: return "plain image";
    case Layout::Reference: return "reference";
  }
  return "unknown";
}

// See Note [oneDNN convolution layouts].
inline Layout choose_layout(const ConvGeometry& g, ConvPass pass) {
  if (g.is_pointwise()) return Layout::Plain;
  if (g.c_in < kFewChannels) {
    if (pass == ConvPass::BackwardData) return Layout::Reference;
    if (pass == ConvPass::Forward && g.k() < kFewMacs) return Layout::Plain;
    return Layout::PlainImage;
  }
  return Layout::Blocked;
}

}  // namespace lockstep::native::onednn_detail
