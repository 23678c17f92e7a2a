// core/native/fast/conv_onednn_passes.cpp — the three convolution passes on oneDNN
// primitives (conv2d_forward_onednn, conv2d_backward_onednn), for the passes
// choose_conv gives to oneDNN (conv_dispatch.cpp): the cached primitive of each
// pass, the reorder of grad_output shared by both backward passes, the summed input gradient (Note
// [Convolution gradients summed in place]) and the forward's workspace (Note
// [Convolution workspace]), both in conv_onednn.h.
// Read before: core/native/fast/conv_onednn_run.h. Read next: core/native/fast/conv_1x1_gemm.h.
#include <memory>
#include <vector>

#include "core/native/fast/conv_onednn.h"
#include "core/native/fast/conv_onednn_run.h"
#include "core/parallel.h"

namespace lockstep::native {

using namespace onednn_detail;

namespace {

// A workspace for the forward `c` of (g, bias) when the backward-weights pass
// will run a primitive that reads the input in the layout c reorders it into;
// the forward then reorders into it. Null otherwise.
std::shared_ptr<ConvWorkspace> make_workspace(const ConvGeometry& g, const CachedConv& c,
                                              bool bias) {
  const Slot& src = c.slots[0];
  if (src.arg != DNNL_ARG_SRC || !src.convert) return nullptr;
  const auto weights = lookup(g, ConvPass::BackwardWeights, bias);
  if (!weights || weights->slots[1].arg != DNNL_ARG_SRC || weights->slots[1].inner != src.inner) {
    return nullptr;
  }
  auto ws = std::make_shared<ConvWorkspace>();
  const auto floats = static_cast<int64_t>((src.inner.get_size() + 3) / sizeof(float));
  ws->blocked_src = empty({floats}, kFloat32);
  ws->layout = src.inner;
  return ws;
}

}  // namespace

bool conv2d_forward_onednn(const ConvGeometry& g, const float* x, const float* w,
                           const float* bias, float* y,
                           std::shared_ptr<const ConvWorkspace>* workspace) {
  const auto c = lookup(g, ConvPass::Forward, bias != nullptr);
  if (!c) return false;
  std::vector<Arg> buffers{{x}, {w}};
  if (workspace != nullptr) {
    if (auto ws = make_workspace(g, *c, bias != nullptr)) {
      void* blocked = ws->blocked_src.data_ptr<float>();
      guarded("the input reorder", g, "conv2d", [&] {
        dnnl::stream& stream = thread_stream();
        ScratchArena arena;
        convert(c->slots[0], memory(c->slots[0].plain, cpu_engine(), const_cast<float*>(x)),
                memory(ws->layout, cpu_engine(), blocked), stream,
                [&](const memory::desc& md) { return arena.get(md.get_size()); });
        stream.wait();
      });
      buffers[0] = {blocked, true};
      *workspace = std::move(ws);
    }
  }
  if (bias != nullptr) buffers.push_back({bias});
  buffers.push_back({y});
  run(*c, buffers, g, "conv2d");
  return true;
}

ConvBackwardDone conv2d_backward_onednn(const ConvGeometry& g, const float* gy, const float* x,
                                        const float* w, float* gx, float* gw, float* gb,
                                        bool sum_gx, const ConvWorkspace* workspace) {
  const char* op = "conv2d_backward";
  const auto data = gx != nullptr ? lookup(g, ConvPass::BackwardData, false) : nullptr;
  const auto weights =
      gw != nullptr ? lookup(g, ConvPass::BackwardWeights, gb != nullptr) : nullptr;
  // diff_dst is slot 0 of both passes; when both want it in the same blocked
  // layout, it is reordered once, into a buffer of its own.
  Arg diff_dst{gy};
  ScratchArena shared;  // lives until both passes are done
  if (data && weights && data->slots[0].convert && weights->slots[0].convert &&
      data->slots[0].inner == weights->slots[0].inner) {
    const Slot& slot = data->slots[0];
    auto scratch = [&](const memory::desc& md) { return shared.get(md.get_size()); };
    void* inner = scratch(slot.inner);
    guarded("the diff_dst reorder", g, op, [&] {
      dnnl::stream& stream = thread_stream();
      convert(slot, memory(slot.plain, cpu_engine(), const_cast<float*>(gy)),
              memory(slot.inner, cpu_engine(), inner), stream, scratch);
      stream.wait();
    });
    diff_dst = {inner, true};
  }
  if (data && !sum_gx) run(*data, {diff_dst, {w}, {gx}}, g, op);
  if (data && sum_gx) {  // Note [Convolution gradients summed in place]: the primitive cannot add
    Tensor part = empty({g.n * g.c_in * g.h * g.w}, kFloat32);  // (N, C_in, H, W), flat
    float* pp = part.data_ptr<float>();
    run(*data, {diff_dst, {w}, {pp}}, g, op);
    parallel_for(0, part.numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) gx[i] += pp[i];
    });
  }
  if (weights) {
    std::vector<Arg> buffers{diff_dst, {x}, {gw}};
    // Note [Convolution workspace]: the forward's blocked input, if it is in this layout.
    if (workspace != nullptr && workspace->blocked_src.defined() &&
        weights->slots[1].inner == workspace->layout) {
      buffers[1] = {workspace->blocked_src.data_ptr<float>(), true};
    }
    if (gb != nullptr) buffers.push_back({gb});
    run(*weights, buffers, g, op);
  }
  return {data != nullptr, weights != nullptr};
}

}  // namespace lockstep::native
