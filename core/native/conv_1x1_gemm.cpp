// core/native/conv_1x1_gemm.cpp — 1x1 convolution passes as GEMMs (Note [1x1
// convolutions as GEMMs] in conv_1x1_gemm.h): the subsampling gather/scatter and
// one native::gemm per image.
// Read before: core/native/conv_1x1_gemm.h. Read next: core/native/conv_onednn.cpp.
#include "core/native/conv_1x1_gemm.h"

#include <algorithm>

#include "core/native/gemm.h"
#include "core/native/native.h"
#include "core/parallel.h"

namespace lockstep::native {

namespace {

// 1x1, unpadded, ungrouped: every pass is a GEMM over the (subsampled) image.
bool one_by_one(const ConvGeometry& g) {
  return g.kh == 1 && g.kw == 1 && g.pad_h == 0 && g.pad_w == 0 && g.groups == 1;
}
bool strided(const ConvGeometry& g) { return g.stride_h > 1 || g.stride_w > 1; }

// Strided 1x1 layers with fewer output pixels per image than this keep the primitives:
// one GEMM per image is too thin there (ResNet's 1024->2048 at 14x14 -> 7x7: 49 columns
// per GEMM, 1.1x slower than the blocked primitive).
constexpr int64_t kMinStridedPixels = 196;
bool strided_by_gemm(const ConvGeometry& g) { return strided(g) && g.p() >= kMinStridedPixels; }

// xs[n, c, i, j] = x[n, c, i * stride_h, j * stride_w]: (N, C_in, H, W) -> (N, C_in, oH, oW).
void gather_strided(const ConvGeometry& g, const float* x, float* xs) {
  parallel_for(0, g.n * g.c_in, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t nc = lo; nc < hi; ++nc) {
      const float* src = x + nc * g.h * g.w;
      float* dst = xs + nc * g.p();
      for (int64_t i = 0; i < g.oh; ++i) {
        const float* row = src + i * g.stride_h * g.w;
        for (int64_t j = 0; j < g.ow; ++j) dst[i * g.ow + j] = row[j * g.stride_w];
      }
    }
  });
}

// The adjoint of gather_strided: gx = 0, then gx[n, c, i * sh, j * sw] = gxs[n, c, i, j].
void scatter_strided(const ConvGeometry& g, const float* gxs, float* gx) {
  parallel_for(0, g.n * g.c_in, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t nc = lo; nc < hi; ++nc) {
      float* dst = gx + nc * g.h * g.w;
      const float* src = gxs + nc * g.p();
      std::fill(dst, dst + g.h * g.w, 0.0f);
      for (int64_t i = 0; i < g.oh; ++i) {
        float* row = dst + i * g.stride_h * g.w;
        for (int64_t j = 0; j < g.ow; ++j) row[j * g.stride_w] = src[i * g.ow + j];
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

// gxs_n (C_in, P) = w^T (C_in, C_out) . gy_n (C_out, P).
void one_by_one_backward_data(const ConvGeometry& g, const float* gy, const float* w, float* gxs) {
  const int64_t p = g.p();
  for (int64_t n = 0; n < g.n; ++n) {
    gemm<float>(true, false, g.c_in, p, g.c_out, 1.0f, w, g.c_in, gy + n * g.c_out * p, p, 0.0f,
                gxs + n * g.c_in * p, p);
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

// A (N, C_in, oH, oW) float32 scratch tensor for xs or gxs.
Tensor subsampled(const ConvGeometry& g) { return empty({g.n, g.c_in, g.oh, g.ow}, kFloat32); }

}  // namespace

bool conv1x1_gemm_forward(const ConvGeometry& g, const float* x, const float* w, const float* bias,
                          float* y) {
  if (!one_by_one(g) || !strided_by_gemm(g) || bias != nullptr) return false;
  Tensor xs = subsampled(g);  // (N, C_in, oH, oW)
  gather_strided(g, x, xs.data_ptr<float>());
  one_by_one_forward(g, xs.data_ptr<float>(), w, y);
  return true;
}

ConvBackwardDone conv1x1_gemm_backward(const ConvGeometry& g, const float* gy, const float* x,
                                       const float* w, float* gx, float* gw, const float* gb) {
  ConvBackwardDone done;
  if (!one_by_one(g) || (strided(g) && !strided_by_gemm(g))) return done;
  if (gx != nullptr) {
    if (strided(g)) {
      Tensor gxs = subsampled(g);  // (N, C_in, oH, oW)
      one_by_one_backward_data(g, gy, w, gxs.data_ptr<float>());
      scatter_strided(g, gxs.data_ptr<float>(), gx);
    } else {
      one_by_one_backward_data(g, gy, w, gx);
    }
    done.input = true;
  }
  if (gw != nullptr && strided_by_gemm(g) && gb == nullptr) {
    Tensor xs = subsampled(g);
    gather_strided(g, x, xs.data_ptr<float>());
    one_by_one_backward_weights(g, gy, xs.data_ptr<float>(), gw);
    done.weight = true;
  }
  return done;
}

}  // namespace lockstep::native
