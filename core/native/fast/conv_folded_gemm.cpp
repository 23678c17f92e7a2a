// core/native/fast/conv_folded_gemm.cpp — small-output convolution passes as
// batch-folded GEMMs (Note [Small-output convolutions as batch-folded GEMMs] in
// conv_folded_gemm.h): im2row over the batch, one native::gemm per pass, and
// the (N, C, P) <-> (C, N, P) transposes around it.
// Read before: core/native/fast/conv_folded_gemm.h. Read next: core/native/fast/conv_onednn.cpp.
#include "core/native/fast/conv_folded_gemm.h"

#include <string>

#include "core/native/conv_columns.h"
#include "core/native/fast/conv_1x1_gemm.h"
#include "core/native/fast/conv_onednn_run.h"
#include "core/native/gemm.h"
#include "core/native/native.h"
#include "core/profiler.h"

namespace lockstep::native {

using conv_columns::im2row;
using conv_columns::row2im;
using conv_columns::transpose_batch;

namespace {

// Outputs with fewer pixels than this fold (Note [Small-output convolutions as
// batch-folded GEMMs]: 3x3 and 1x1 outputs paid, 4x4 did not).
constexpr int64_t kFoldMaxPixels = 16;
// Layers with fewer output channels keep the primitives (as kFewChannels in
// conv_onednn_layout.h: the GEMMs are too thin to pay for im2row).
constexpr int64_t kFoldMinOutChannels = 16;

// rows (N P, K) of x, float32, uninitialised.
Tensor rows_tensor(const ConvGeometry& g) { return empty({g.n * g.p(), g.k()}, kFloat32); }

// The profiler's name for one pass run here (Note [Convolution profile labels]),
// built only while something records.
std::string label(const ConvGeometry& g, ConvPass pass) {
  if (!profiler::is_recording()) return {};
  return conv_profile_label(g, pass, "gemm-folded-im2row");
}

// The rows of x: the forward's, from the workspace, or built now.
Tensor rows_of(const ConvGeometry& g, const float* x, const ConvWorkspace* workspace) {
  if (workspace != nullptr && workspace->rows.defined() &&
      workspace->gathered_from[0] == g.c_in && workspace->gathered_from[1] == g.h &&
      workspace->gathered_from[2] == g.w && workspace->rows.size(0) == g.n * g.p() &&
      workspace->rows.size(1) == g.k()) {
    return workspace->rows;
  }
  Tensor rows = rows_tensor(g);
  im2row(x, g, rows.data_ptr<float>());
  return rows;
}

}  // namespace

bool conv_folded_gemm_takes(const ConvGeometry& g, ConvPass pass, bool bias) {
  if (g.groups != 1 || bias || g.p() >= kFoldMaxPixels || g.c_out < kFoldMinOutChannels) {
    return false;
  }
  return !conv1x1_gemm_takes(g, pass, bias);
}

bool conv_folded_gemm_forward(const ConvGeometry& g, const float* x, const float* w, float* y,
                              std::shared_ptr<const ConvWorkspace>* workspace) {
  if (!conv_folded_gemm_takes(g, ConvPass::Forward, false)) return false;
  const std::string name = label(g, ConvPass::Forward);
  profiler::Scope scope(name);
  const int64_t np = g.n * g.p(), k = g.k();
  Tensor rows = rows_tensor(g);  // (N P, K)
  im2row(x, g, rows.data_ptr<float>());
  Tensor yc = empty({g.c_out, np}, kFloat32);  // (C_out, N P)
  gemm<float>(false, true, g.c_out, np, k, 1.0f, w, k, rows.data_ptr<float>(), k, 0.0f,
              yc.data_ptr<float>(), np);
  transpose_batch(yc.data_ptr<float>(), y, g.n, g.c_out, g.p(), /*to_channel_major=*/false);
  if (workspace != nullptr) {  // Note [Convolution workspace]: for backward-weights
    auto ws = std::make_shared<ConvWorkspace>();
    ws->rows = std::move(rows);
    ws->gathered_from[0] = g.c_in;
    ws->gathered_from[1] = g.h;
    ws->gathered_from[2] = g.w;
    *workspace = std::move(ws);
  }
  return true;
}

ConvBackwardDone conv_folded_gemm_backward(const ConvGeometry& g, const float* gy, const float* x,
                                           const float* w, float* gx, float* gw, bool sum_gx,
                                           const ConvWorkspace* workspace) {
  ConvBackwardDone done;
  const bool data_here = gx != nullptr && conv_folded_gemm_takes(g, ConvPass::BackwardData, false);
  const bool weight_here =
      gw != nullptr && conv_folded_gemm_takes(g, ConvPass::BackwardWeights, false);
  if (!data_here && !weight_here) return done;
  const int64_t np = g.n * g.p(), k = g.k();
  Tensor gyc = empty({g.c_out, np}, kFloat32);  // (C_out, N P)
  {
    profiler::Scope scope("conv2d.reorder");  // shared by both passes
    transpose_batch(gy, gyc.data_ptr<float>(), g.n, g.c_out, g.p(), /*to_channel_major=*/true);
  }
  if (data_here) {
    const std::string name = label(g, ConvPass::BackwardData);
    profiler::Scope scope(name);
    Tensor drows = rows_tensor(g);  // (N P, K)
    gemm<float>(true, false, np, k, g.c_out, 1.0f, gyc.data_ptr<float>(), np, w, k, 0.0f,
                drows.data_ptr<float>(), k);
    row2im(drows.data_ptr<float>(), g, gx, sum_gx);
    done.input = true;
  }
  if (weight_here) {
    const std::string name = label(g, ConvPass::BackwardWeights);
    profiler::Scope scope(name);
    const Tensor rows = rows_of(g, x, workspace);  // (N P, K)
    gemm<float>(false, false, g.c_out, k, np, 1.0f, gyc.data_ptr<float>(), np,
                rows.data_ptr<float>(), k, 0.0f, gw, k);
    done.weight = true;
  }
  return done;
}

}  // namespace lockstep::native
