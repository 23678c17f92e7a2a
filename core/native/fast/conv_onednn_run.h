// core/native/fast/conv_onednn_run.h — internal to the oneDNN convolution path: a
// cached primitive (CachedConv) and how one runs on our buffers (run), shared
// by conv_onednn.cpp, which builds and caches the primitives, and
// conv_onednn_passes.cpp, which runs the passes, and the forward's workspace
// (ConvWorkspace), which conv_1x1_gemm.cpp fills too. Not part of the public API.
//
// Read before: core/native/fast/conv_onednn.h. Read next: core/native/fast/conv_onednn.cpp.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/native/fast/onednn_engine.h"

#include "core/error.h"
#include "core/factory.h"
#include "core/native/fast/conv_onednn.h"
#include "core/profiler.h"

namespace lockstep::native::onednn_detail {

using dnnl::memory;

// One argument of a cached primitive: our plain layout, the primitive's, and
// the reorder between them (plain -> primitive for inputs, back for outputs),
// empty when they agree.
struct Slot {
  int arg = 0;  // DNNL_ARG_*
  bool output = false;
  memory::desc plain, inner;
  dnnl::reorder convert;
  memory::desc convert_scratchpad;
};

struct CachedConv {
  dnnl::primitive primitive;
  memory::desc scratchpad;
  std::vector<Slot> slots;  // in the order the run_* functions pass pointers
  std::string impl;         // "jit:avx512_core (blocked)"
  std::string label;        // the profiler's name for a run: conv_profile_label()
};

// The cached primitive for (g, pass, bias), built on first use; null means
// "use the reference path".
std::shared_ptr<const CachedConv> lookup(const ConvGeometry& g, ConvPass pass, bool bias);

// "input [N, C, H, W], weight [...], stride ..." for error messages.
std::string geometry_str(const ConvGeometry& g);

// Scratch memory for the blocked copies and scratchpads of one call: request i
// gets buffer i, and the buffers are freed when the call returns, so no copy
// outlives its use (Note [oneDNN scratch memory]).
class ScratchArena {
 public:
  void* get(size_t bytes) {
    const auto floats = static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float));
    buffers_.push_back(empty({floats}, kFloat32));
    return buffers_.back().data_ptr<float>();
  }

 private:
  std::vector<Tensor> buffers_;
};

// One caller buffer for a slot: in our plain layout, or (inner) already in the
// primitive's layout, as the diff_dst both backward passes share.
struct Arg {
  const void* ptr;
  bool inner = false;
};

// Runs fn, turning a oneDNN error into an ls::Error that names the op and geometry.
template <class F>
void guarded(const std::string& what, const ConvGeometry& g, const char* op, F&& fn) {
  try {
    fn();
  } catch (const dnnl::error& e) {
    throw Error(lockstep::detail::str(
        op, ": oneDNN failed (", e.what(), ", status ", static_cast<int>(e.status), ") running ",
        what, " for ", geometry_str(g),
        "; switch to the im2col path with native::set_conv_backend(ConvBackend::Reference)"));
  }
}

inline const char* reorder_label(int arg) {
  switch (arg) {
    case DNNL_ARG_SRC: return "conv2d.reorder src";
    case DNNL_ARG_WEIGHTS: return "conv2d.reorder weights";
    case DNNL_ARG_DST: return "conv2d.reorder dst";
    case DNNL_ARG_DIFF_DST: return "conv2d.reorder diff_dst";
    case DNNL_ARG_DIFF_SRC: return "conv2d.reorder diff_src";
    case DNNL_ARG_DIFF_WEIGHTS: return "conv2d.reorder diff_weights";
    default: return "conv2d.reorder";
  }
}

// Reorders `from` into `to` with a slot's reorder; its scratchpad comes from `scratch`.
template <class Scratch>
void convert(const Slot& slot, const memory& from, const memory& to, dnnl::stream& stream,
             Scratch&& scratch) {
  profiler::Scope scope(reorder_label(slot.arg));
  std::unordered_map<int, memory> args{{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
  if (slot.convert_scratchpad.get_size() > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(slot.convert_scratchpad, cpu_engine(),
                                             scratch(slot.convert_scratchpad)));
  }
  slot.convert.execute(stream, args);
}

// Runs `c` on the caller's buffers, one per slot in slot order.
void run(const CachedConv& c, const std::vector<Arg>& buffers, const ConvGeometry& g,
         const char* op);

}  // namespace lockstep::native::onednn_detail

namespace lockstep::native {

// Note [Convolution workspace] (conv_onednn.h): what a forward leaves for its
// backward-weights pass. Either the oneDNN primitive's blocked input and its
// layout, or the image a 1x1 GEMM path gathered (Note [1x1 convolutions as
// GEMMs]: the strided image's subsample, or the folded batch's channel-major
// copy), with the order it is stored in, or the windows a small-output layer's
// forward copied (Note [Small-output convolutions as batch-folded GEMMs]).
struct ConvWorkspace {
  Tensor blocked_src;  // (bytes of `layout`) as float32
  dnnl::memory::desc layout;
  Tensor gathered_src;  // (N, C_in, oH, oW), or (C_in, N, oH, oW) when channel_major
  bool channel_major = false;
  Tensor rows;                           // (N oH oW, C_in kH kW): im2row of the input
  int64_t gathered_from[3] = {0, 0, 0};  // the input's (C_in, H, W) it was gathered from
};

}  // namespace lockstep::native
