// core/native/fast/conv_1x1_gemm.cpp — 1x1 convolution passes as GEMMs (Note [1x1
// convolutions as GEMMs] in conv_1x1_gemm.h): the subsampling gather/scatter, and
// one native::gemm per image or, for small outputs, one over the whole batch.
// Read before: core/native/fast/conv_1x1_gemm.h. Read next: core/native/fast/conv_onednn.cpp.
#include "core/native/fast/conv_1x1_gemm.h"

#include <algorithm>
#include <string>

#include "core/native/conv_columns.h"
#include "core/native/fast/conv_onednn_run.h"
#include "core/native/gemm.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/profiler.h"

namespace lockstep::native {

using conv_columns::transpose_batch;

namespace {

// 1x1, unpadded, ungrouped: every pass is a GEMM over the (subsampled) image.
bool one_by_one(const ConvGeometry& g) {
  return g.kh == 1 && g.kw == 1 && g.pad_h == 0 && g.pad_w == 0 && g.groups == 1;
}
bool strided(const ConvGeometry& g) { return g.stride_h > 1 || g.stride_w > 1; }

// Strided 1x1 layers with at least this many output pixels per image run one GEMM per
// image; below it every 1x1 layer runs the batch-folded GEMMs (Note [1x1 convolutions
// as GEMMs]: at 7x7, 49 columns per GEMM ran well below the folded GEMM's rate).
constexpr int64_t kFoldPixels = 196;
bool folded(const ConvGeometry& g) { return g.p() < kFoldPixels; }
bool strided_by_gemm(const ConvGeometry& g) { return strided(g) && !folded(g); }
// Whether the forward and (without bias) backward-weights run here.
bool all_passes_here(const ConvGeometry& g) { return folded(g) || strided_by_gemm(g); }

// Where run (n, c) of a subsampled (N, C, P) tensor lives in its scratch copy:
// image-major (N, C, P), as the tensor, or channel-major (C, N, P) for the folded GEMMs.
int64_t run_offset(int64_t n, int64_t c, int64_t batch, int64_t channels, int64_t p,
                   bool channel_major) {
  return (channel_major ? c * batch + n : n * channels + c) * p;
}

// xs[n, c, i, j] = x[n, c, i * stride_h, j * stride_w]: (N, C_in, H, W) -> (N, C_in, oH, oW),
// stored image- or channel-major.
void gather_strided(const ConvGeometry& g, const float* x, float* xs, bool channel_major) {
  parallel_for(0, g.n * g.c_in, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t nc = lo; nc < hi; ++nc) {
      const int64_t n = nc / g.c_in, c = nc % g.c_in;
      const float* src = x + nc * g.h * g.w;
      float* dst = xs + run_offset(n, c, g.n, g.c_in, g.p(), channel_major);
      if (!strided(g)) {
        std::copy(src, src + g.p(), dst);
        continue;
      }
      for (int64_t i = 0; i < g.oh; ++i) {
        const float* row = src + i * g.stride_h * g.w;
        for (int64_t j = 0; j < g.ow; ++j) dst[i * g.ow + j] = row[j * g.stride_w];
      }
    }
  });
}

// The adjoint of gather_strided: gx = 0, then gx[n, c, i * sh, j * sw] = gxs[n, c, i, j];
// with `sum`, gx keeps its values and gxs is added at those positions instead.
void scatter_strided(const ConvGeometry& g, const float* gxs, float* gx, bool channel_major,
                     bool sum) {
  parallel_for(0, g.n * g.c_in, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t nc = lo; nc < hi; ++nc) {
      const int64_t n = nc / g.c_in, c = nc % g.c_in;
      float* dst = gx + nc * g.h * g.w;
      const float* src = gxs + run_offset(n, c, g.n, g.c_in, g.p(), channel_major);
      if (!strided(g)) {
        if (sum) {
          for (int64_t i = 0; i < g.p(); ++i) dst[i] += src[i];
        } else {
          std::copy(src, src + g.p(), dst);
        }
        continue;
      }
      if (!sum) std::fill(dst, dst + g.h * g.w, 0.0f);
      for (int64_t i = 0; i < g.oh; ++i) {
        float* row = dst + i * g.stride_h * g.w;
        for (int64_t j = 0; j < g.ow; ++j) row[j * g.stride_w] += src[i * g.ow + j];
      }
    }
  });
}

// y_n (C_out, P) = w (C_out, C_in) . xs_n (C_in, P), xs the (subsampled) image.
void one_by_one_forward(const ConvGeometry& g, const float* xs, const float* w, float* y) {
  const int64_t p = g.p();
  for (int64_t n = 0; n < g.n; ++n) {
    gemm<float>(false, false, g.c_out, p, g.c_in, 1.0f, w, g.c_in, xs + n * g.c_in * p, p, 0.0f,
                y + n * g.c_out * p, p);
  }
}

// gxs_n (C_in, P) = w^T (C_in, C_out) . gy_n (C_out, P), or += with `sum`.
void one_by_one_backward_data(const ConvGeometry& g, const float* gy, const float* w, float* gxs,
                              bool sum) {
  const int64_t p = g.p();
  for (int64_t n = 0; n < g.n; ++n) {
    gemm<float>(true, false, g.c_in, p, g.c_out, 1.0f, w, g.c_in, gy + n * g.c_out * p, p,
                sum ? 1.0f : 0.0f, gxs + n * g.c_in * p, p);
  }
}

// gw (C_out, C_in) = sum over n of gy_n (C_out, P) . xs_n^T (P, C_in).
void one_by_one_backward_weights(const ConvGeometry& g, const float* gy, const float* xs,
                                 float* gw) {
  const int64_t p = g.p();
  for (int64_t n = 0; n < g.n; ++n) {
    gemm<float>(false, true, g.c_out, g.c_in, p, 1.0f, gy + n * g.c_out * p, p, xs + n * g.c_in * p,
                p, n == 0 ? 0.0f : 1.0f, gw, g.c_in);
  }
}

// A (N, C, oH, oW) float32 scratch tensor (image- or channel-major by use) with
// C = C_in (xs, gxs) or C_out (yc, gyc).
Tensor subsampled(const ConvGeometry& g, int64_t channels) {
  return empty({g.n, channels, g.oh, g.ow}, kFloat32);
}

// The profiler's name for one pass run here (Note [Convolution profile labels]),
// built only while something records.
std::string label(const ConvGeometry& g, ConvPass pass) {
  if (!profiler::is_recording()) return {};
  return conv_profile_label(g, pass, folded(g) ? "gemm-folded" : "gemm");
}

}  // namespace

bool conv1x1_gemm_takes(const ConvGeometry& g, ConvPass pass, bool bias) {
  if (!one_by_one(g)) return false;
  return pass == ConvPass::BackwardData || (all_passes_here(g) && !bias);
}

bool conv1x1_gemm_folds(const ConvGeometry& g) { return folded(g); }

bool conv1x1_gemm_forward(const ConvGeometry& g, const float* x, const float* w, const float* bias,
                          float* y, std::shared_ptr<const ConvWorkspace>* workspace) {
  if (!conv1x1_gemm_takes(g, ConvPass::Forward, bias != nullptr)) return false;
  const std::string name = label(g, ConvPass::Forward);
  profiler::Scope scope(name);
  Tensor xs = subsampled(g, g.c_in);  // (N, C_in, oH, oW), or (C_in, N, oH, oW) folded
  gather_strided(g, x, xs.data_ptr<float>(), folded(g));
  if (workspace != nullptr) {  // Note [Convolution workspace]: for backward-weights
    auto ws = std::make_shared<ConvWorkspace>();
    ws->gathered_src = xs;
    ws->channel_major = folded(g);
    ws->gathered_from[0] = g.c_in;
    ws->gathered_from[1] = g.h;
    ws->gathered_from[2] = g.w;
    *workspace = std::move(ws);
  }
  if (!folded(g)) {
    one_by_one_forward(g, xs.data_ptr<float>(), w, y);
    return true;
  }
  const int64_t np = g.n * g.p();
  Tensor yc = subsampled(g, g.c_out);  // (C_out, N, oH, oW)
  gemm<float>(false, false, g.c_out, np, g.c_in, 1.0f, w, g.c_in, xs.data_ptr<float>(), np, 0.0f,
              yc.data_ptr<float>(), np);
  transpose_batch(yc.data_ptr<float>(), y, g.n, g.c_out, g.p(), /*to_channel_major=*/false);
  return true;
}

namespace {

// The image gathered as gather_strided(g, x, ., channel_major) would gather it:
// the forward's, from the workspace, or gathered now.
Tensor gathered(const ConvGeometry& g, const float* x, bool channel_major,
                const ConvWorkspace* workspace) {
  if (workspace != nullptr && workspace->gathered_src.defined() &&
      workspace->channel_major == channel_major && workspace->gathered_from[0] == g.c_in &&
      workspace->gathered_from[1] == g.h && workspace->gathered_from[2] == g.w &&
      workspace->gathered_src.numel() == g.n * g.c_in * g.p()) {
    return workspace->gathered_src;
  }
  Tensor xs = subsampled(g, g.c_in);
  gather_strided(g, x, xs.data_ptr<float>(), channel_major);
  return xs;
}

}  // namespace

ConvBackwardDone conv1x1_gemm_backward(const ConvGeometry& g, const float* gy, const float* x,
                                       const float* w, float* gx, float* gw, const float* gb,
                                       bool sum_gx, const ConvWorkspace* workspace) {
  ConvBackwardDone done;
  if (!one_by_one(g)) return done;  // every strided 1x1 has all_passes_here
  const bool weight_here =
      gw != nullptr && conv1x1_gemm_takes(g, ConvPass::BackwardWeights, gb != nullptr);
  if (folded(g) && (gx != nullptr || weight_here)) {
    const int64_t np = g.n * g.p();
    Tensor gyc = subsampled(g, g.c_out);  // (C_out, N, oH, oW)
    {
      profiler::Scope scope("conv2d.reorder");  // shared by both passes
      transpose_batch(gy, gyc.data_ptr<float>(), g.n, g.c_out, g.p(), /*to_channel_major=*/true);
    }
    if (gx != nullptr) {
      const std::string name = label(g, ConvPass::BackwardData);
      profiler::Scope scope(name);
      Tensor gxc = subsampled(g, g.c_in);  // (C_in, N, oH, oW)
      gemm<float>(true, false, g.c_in, np, g.c_out, 1.0f, w, g.c_in, gyc.data_ptr<float>(), np,
                  0.0f, gxc.data_ptr<float>(), np);
      scatter_strided(g, gxc.data_ptr<float>(), gx, /*channel_major=*/true, sum_gx);
      done.input = true;
    }
    if (weight_here) {
      const std::string name = label(g, ConvPass::BackwardWeights);
      profiler::Scope scope(name);
      const Tensor xc = gathered(g, x, /*channel_major=*/true, workspace);  // (C_in, N, oH, oW)
      gemm<float>(false, true, g.c_out, g.c_in, np, 1.0f, gyc.data_ptr<float>(), np,
                  xc.data_ptr<float>(), np, 0.0f, gw, g.c_in);
      done.weight = true;
    }
    return done;
  }
  if (gx != nullptr) {
    const std::string name = label(g, ConvPass::BackwardData);
    profiler::Scope scope(name);
    if (strided(g)) {
      Tensor gxs = subsampled(g, g.c_in);  // (N, C_in, oH, oW)
      one_by_one_backward_data(g, gy, w, gxs.data_ptr<float>(), /*sum=*/false);
      scatter_strided(g, gxs.data_ptr<float>(), gx, /*channel_major=*/false, sum_gx);
    } else {
      one_by_one_backward_data(g, gy, w, gx, sum_gx);  // the GEMM adds into gx itself
    }
    done.input = true;
  }
  if (weight_here) {
    const std::string name = label(g, ConvPass::BackwardWeights);
    profiler::Scope scope(name);
    const Tensor xs = gathered(g, x, /*channel_major=*/false, workspace);  // (N, C_in, oH, oW)
    one_by_one_backward_weights(g, gy, xs.data_ptr<float>(), gw);
    done.weight = true;
  }
  return done;
}

}  // namespace lockstep::native
