// core/native/fast/conv_onednn.h — the oneDNN convolution path (float32), behind ../conv.cpp.
//
// § Note [Convolution backends]
// conv2d_forward / conv2d_backward (../conv.cpp) have two backends, chosen
// process-wide with set_conv_backend (core/native/nn_kernels.h):
//   Reference  im2col + GEMM in conv.cpp, the definition (float32 and float64)
//   OneDNN     oneDNN's convolution primitives (this file; float32 only), the default
// float64 always runs the reference. The oneDNN path takes and returns plain
// NCHW buffers; inside, each pass (forward, backward-data, backward-weights)
// picks the layouts its primitive works in (see Note [oneDNN convolution
// layouts] in conv_onednn_layout.h) and reorders at the edges. Primitives are built
// once per geometry and kept in a process-wide cache, so steady-state training
// builds none. Where oneDNN has only its slow reference implementation for a
// pass (or the layout plan leaves the pass to the reference), the functions
// below say so and conv.cpp runs the im2col path for that pass.
// Tests compare the two backends (tests/core/test_conv_onednn.cpp).
//
// Read before: core/native/conv_geometry.h. Read next: core/native/fast/conv_onednn.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/native/conv_dispatch.h"
#include "core/native/conv_geometry.h"
#include "core/native/nn_kernels.h"

namespace lockstep::native {

// Whether oneDNN has a fast primitive for `pass` of `g` (with a bias when `bias`):
// one of choose_conv's rules (conv_dispatch.cpp). Builds and caches it on first use.
bool conv_onednn_has_primitive(const ConvGeometry& g, ConvPass pass, bool bias);

// Contiguous float32 buffers with the shapes of `g`:
//   x (N, C_in, H, W), w (C_out, C_in / groups, kH, kW), bias (C_out) or null,
//   y / gy (N, C_out, oH, oW).
// Each runs the cached primitive of the passes choose_conv gave to oneDNN
// (conv_dispatch.cpp). The forward writes y and returns true, or returns false
// having written nothing when oneDNN declines the pass (the caller then uses the
// reference).
// With `workspace` not null, also leaves there what the backward-weights pass
// can reuse, or null (Note [Convolution workspace]).
bool conv2d_forward_onednn(const ConvGeometry& g, const float* x, const float* w,
                           const float* bias, float* y,
                           std::shared_ptr<const ConvWorkspace>* workspace = nullptr);
// The backward passes asked for: gx (N, C_in, H, W) when gx is not null;
// gw (C_out, C_in / groups, kH, kW) and, when gb is not null, gb (C_out) when gw
// is not null; each overwritten, except gx with sum_gx, which gets the input
// gradient added to what it holds (Note [Convolution gradients summed in place]).
// Says which passes ran (a pass oneDNN declines writes nothing). Both passes
// read gy; it is reordered once for the two. The 1x1 passes that choose_conv
// gives to GEMMs are not run here (conv1x1_gemm_backward in conv_1x1_gemm.h).
struct ConvBackwardDone {
  bool input = false, weight = false;
};
ConvBackwardDone conv2d_backward_onednn(const ConvGeometry& g, const float* gy, const float* x,
                                        const float* w, float* gx, float* gw, float* gb,
                                        bool sum_gx = false,
                                        const ConvWorkspace* workspace = nullptr);

// § Note [Convolution workspace]
// A blocked convolution reorders its input image from NCHW into oneDNN's
// blocked layout in forward, and its backward-weights pass reorders the same
// image again (Note [oneDNN convolution layouts]). conv2d_forward_training
// keeps the forward's blocked copy in a ConvWorkspace when the backward-weights
// primitive reads the image in the very same layout; Conv2dBackward holds it
// until its backward has run, and the backward-weights pass reads it instead of
// reordering. The cost is memory: the blocked copy lives from forward to
// backward (about 60 MB for ResNet50 at batch 8, where all 16 blocked 3x3
// layers qualify). The workspace records the layout it was written in, and the
// backward uses it only if its primitive asks for exactly that layout (the
// thread count or the Winograd mode may have changed in between); otherwise it
// reorders as before. The 1x1 convolutions done as GEMMs (Note [1x1
// convolutions as GEMMs] in conv_1x1_gemm.h) likewise keep the image their
// forward gathered, strided layers' subsample or the folded 7x7 layers'
// channel-major copy, and their backward-weights pass uses it when it has the
// shape and order that pass would gather (ResNet50 at batch 8: 13 layers, up to
// 6.4 MB each; the three downsample layers' backward-weights measurably faster
// in the profile: docs/results/kernel_choices.md).

// § Note [Convolution gradients summed in place]
// In a residual network the gradient of a block's input is the sum of the
// block's first convolution's input gradient and the gradient that came along
// the shortcut, which the engine already holds (Note [Gradients summed in place]
// in autograd/engine.cpp). native::conv2d_backward_with hands that pending
// gradient to the convolution, which adds into it: the 1x1 stride-1 GEMMs with
// beta = 1 (one pass over the memory instead of a GEMM write plus a separate
// read-read-write sum), the other 1x1 paths in their scatter, the reference in
// col2im; oneDNN's backward-data primitive cannot add, so it writes a scratch
// buffer that is then added.

// Whether eligible 3x3 convolutions may use oneDNN's Winograd algorithm
// (Note [Winograd convolutions] in conv_winograd.cpp):
//   Off    always the direct algorithm
//   Auto   Winograd where the measured rule says it is faster (images of at
//          least 14x14); deterministic, so every process chooses alike
//   Timed  per geometry and pass, whichever of Winograd and direct ran faster
//          when the primitive was built (timed once, at first use); may choose
//          differently in another process, so runs are not bit-reproducible
//   Force  Winograd wherever oneDNN implements it (tests and benchmarks)
// The default (Auto) comes from env LOCKSTEP_CONV_WINOGRAD (0 / off,
// 1 / auto, timed, force), read once; set_conv_winograd overrides it
// process-wide. The mode is part of the primitive cache key.
enum class ConvWinograd { Off, Auto, Timed, Force };
void set_conv_winograd(ConvWinograd mode);
ConvWinograd conv_winograd();
const char* conv_winograd_name(ConvWinograd mode);
// Whether oneDNN has Winograd kernels on this CPU (they are AVX-512 ones; without
// them every mode runs direct): found once, by building one small forward primitive.
bool conv_winograd_available();
// The mode env LOCKSTEP_CONV_WINOGRAD asks for now (the default when unset);
// throws ls::Error naming the accepted values when it is anything else.
ConvWinograd conv_winograd_from_env();

// What the cache holds, for tests and benchmarks: primitives built so far
// (every call that missed the cache) and the entries held now.
struct ConvOnednnCacheStats {
  int64_t built = 0;
  int64_t entries = 0;
};
ConvOnednnCacheStats conv_onednn_cache_stats();

// The oneDNN implementation and layout one pass uses for `g` (with a bias when
// `bias`), e.g. "jit:avx512_core (blocked)", or "none" when it falls back to the
// reference. For benchmark output and tests. (A 1x1 pass that
// conv2d_forward_onednn / conv2d_backward_onednn run as GEMMs still reports its
// cached primitive: Note [1x1 convolutions as GEMMs] in conv_1x1_gemm.h.)
std::string conv_onednn_impl(const ConvGeometry& g, ConvPass pass, bool bias);

// § Note [Convolution profile labels]
// While the profiler or the timeline records (core/profiler.h), every oneDNN
// primitive run and every 1x1 GEMM pass opens a Scope named by its pass,
// geometry and implementation, e.g.
//   "conv fwd 3x3s1 64->64 @56x56 b8 jit_wino_4x3"
//   "conv bwd-w 1x1s2 1024->2048 @7x7 b8 gemm-folded"
// so LOCKSTEP_PROFILE=1 splits the "conv2d" / "Conv2dBackward" rows into one
// row per layer shape and pass; the reorders between our NCHW and oneDNN's
// blocked layouts get their own row, "conv2d.reorder". `impl` is the
// implementation's short name.
std::string conv_profile_label(const ConvGeometry& g, ConvPass pass, std::string_view impl);

}  // namespace lockstep::native
