// core/native/fast/conv_bf16_pointwise.cpp — 1x1 bfloat16 convolutions as GEMMs (AMX, or AVX2).
//
// § Note [bf16 1x1 convolutions as GEMMs]
// A 1x1 convolution without padding is a matrix product per image. With image n
// stored NCHW, X_n is the (C_in, P) matrix of its channels (P = oH oW pixels,
// after taking every stride-th pixel), and
//   forward          Y_n (C_out, P) = W (C_out, C_in) X_n (C_in, P)
//   backward-data    dX_n (C_in, P) = W^T (C_in, C_out) dY_n (C_out, P)
//   backward-weights dW (C_out, C_in) = sum_n dY_n (C_out, P) X_n^T (P, C_in)
// so each pass is gemm_bf16 (gemm_bf16.h) reading our NCHW buffers in place: no
// layout reorders at all, and oneDNN's matmul runs them on the AMX tiles (its
// 1x1 backward convolutions in this oneDNN are much slower jit kernels); where
// oneDNN has no bf16 kernels, gemm_bf16's AVX2 kernel does (Note [bf16 GEMM in
// AVX2 registers]), so these layers skip the float32 path's conversions. ResNet50
// has 36 such layers of 53. dW accumulates in float32 across the images (beta = 1
// after the first), the bias gradient is a float32 sum of dY.
// A strided layer first gathers its subsample (N, C_in, oH, oW), which is also
// what the forward keeps for backward-weights; backward-data scatters into the
// strided pixels of a zeroed dX.
//
// § Note [bf16 1x1 convolutions on channels-last activations]
// Stored channels-last (Note [Channels-last activations] in memory_format.h), the
// batch is one (N P, C) matrix, and each pass is ONE GEMM over all N P pixels:
//   forward          Y (N P, C_out) = X (N P, C_in) W^T (C_in, C_out)
//   backward-data    dX (N P, C_in) = dY (N P, C_out) W (C_out, C_in)
//   backward-weights dW (C_out, C_in) = dY^T (C_out, N P) X (N P, C_in)
// M = N P is large at every stage (392 at ResNet50's 7x7 with batch 8, where the
// per-image GEMMs above have N = 49), and dW needs no channel-major copies.
// The forward runs these when conv_bf16_returns_channels_last(), the backward
// when dY is channels-last; operands in the other order are reordered first.
// Read before: core/native/conv_bf16.h, core/native/gemm_bf16.h.
#include <cstring>
#include <vector>

#include "core/env_flag.h"
#include "core/native/conv_bf16.h"
#include "core/native/gemm_bf16.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/profiler.h"

namespace lockstep::native {

bool conv_bf16_is_pointwise_gemm(const ConvGeometry& g) {
  // LOCKSTEP_BF16_1X1_GEMM=0 sends 1x1 layers to oneDNN's convolutions instead (benchmarks).
  static const bool enabled = env_flag("LOCKSTEP_BF16_1X1_GEMM", true);
  return enabled && g.kh == 1 && g.kw == 1 && g.pad_h == 0 && g.pad_w == 0 && g.groups == 1;
}

namespace {

// x (N, C, H, W) bf16 contiguous -> its pixels (s*i, s*j): (N, C, oH, oW).
Tensor subsample(const ConvGeometry& g, const Tensor& x) {
  Tensor out = empty({g.n, g.c_in, g.oh, g.ow}, kBFloat16);
  const BFloat16* xp = x.data_ptr<BFloat16>();
  BFloat16* op = out.data_ptr<BFloat16>();
  parallel_for(0, g.n * g.c_in, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t plane = lo; plane < hi; ++plane) {
      const BFloat16* src = xp + plane * g.h * g.w;
      BFloat16* dst = op + plane * g.oh * g.ow;
      for (int64_t i = 0; i < g.oh; ++i) {
        for (int64_t j = 0; j < g.ow; ++j) dst[i * g.ow + j] = src[i * g.stride_h * g.w + j * g.stride_w];
      }
    }
  });
  return out;
}

// Offsets of image n's matrix in a (N, C, P) buffer: n * C * P.
std::vector<int64_t> image_offsets(int64_t n, int64_t per_image) {
  std::vector<int64_t> off(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) off[static_cast<size_t>(i)] = i * per_image;
  return off;
}

bool strided(const ConvGeometry& g) { return g.stride_h != 1 || g.stride_w != 1; }

// § Note [bf16 1x1 backward-weights over the batch]
// dW = sum_n dY_n X_n^T is N GEMMs of K = P, accumulated in float32 (beta = 1
// after the first): fine while P is large, but at ResNet's 14x14 and 7x7 stages
// (P = 196, 49) each GEMM is too short in K for the AMX tiles and the float32
// dW is read and written N times. Below kOneGemmPixels the two operands are
// first copied channel-major — dY (N, C_out, P) -> (C_out, N P), X likewise —
// and dW is one GEMM of K = N P, about twice as fast at 7x7 copies included
// (docs/results/kernel_choices.md); at 56x56 (P = 3136) the copies cost more
// than they save. The sum is the same
// sum of products in another order (float32 accumulation either way).
constexpr int64_t kOneGemmPixels = 1024;


// ---- channels-last (Note [bf16 1x1 convolutions on channels-last activations]) ----

// x channels-last (N, C, H, W) bf16 -> its pixels (s*i, s*j), channels-last (N, C, oH, oW).
Tensor subsample_channels_last(const ConvGeometry& g, const Tensor& x) {
  Tensor out = empty_channels_last({g.n, g.c_in, g.oh, g.ow}, kBFloat16);
  const BFloat16* xp = channels_last_rows(x).data_ptr<BFloat16>();
  BFloat16* op = channels_last_rows(out).data_ptr<BFloat16>();
  const int64_t c = g.c_in;
  parallel_for(0, g.n * g.oh, 1, [xp, op, &g, c](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {  // r = n * oH + i
      const int64_t n = r / g.oh, i = r % g.oh;
      for (int64_t j = 0; j < g.ow; ++j) {
        std::memcpy(static_cast<void*>(op + (r * g.ow + j) * c),
                    xp + ((n * g.h + i * g.stride_h) * g.w + j * g.stride_w) * c,
                    c * sizeof(BFloat16));
      }
    }
  });
  return out;
}

// gx channels-last (N, C, H, W), zero except at the pixels (s*i, s*j), which take
// gxs channels-last (N, C, oH, oW): backward-data of a strided 1x1 layer.
template <class S>
void scatter_channels_last(const ConvGeometry& g, const Tensor& gxs, const Tensor& gx) {
  const S* src = channels_last_rows(gxs).data_ptr<S>();
  S* dst = channels_last_rows(gx).data_ptr<S>();
  const int64_t c = g.c_in;
  parallel_for(0, g.n * g.h, 1, [src, dst, &g, c](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {  // r = n * H + y: one input row
      const int64_t n = r / g.h, y = r % g.h;
      S* row = dst + r * g.w * c;
      std::memset(static_cast<void*>(row), 0, g.w * c * sizeof(S));
      if (y % g.stride_h != 0 || y / g.stride_h >= g.oh) continue;
      const S* from = src + (n * g.oh + y / g.stride_h) * g.ow * c;
      for (int64_t j = 0; j < g.ow; ++j) {
        std::memcpy(static_cast<void*>(row + j * g.stride_w * c), from + j * c, c * sizeof(S));
      }
    }
  });
}

Tensor forward_channels_last(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                             const Tensor& bias, ConvBf16SavedInput* saved) {
  const Tensor x16 = channels_last(to_dtype(x, kBFloat16));  // (N, C_in, H, W)
  const Tensor xs = strided(g) ? subsample_channels_last(g, x16) : x16;  // (N, C_in, oH, oW)
  if (saved != nullptr) *saved = ConvBf16SavedInput{Tensor(), xs, strided(g), xs.is_same(x)};
  const Tensor wc = contiguous(w);  // (C_out, C_in)
  const int64_t np = g.n * g.oh * g.ow;
  Tensor y = empty_channels_last({g.n, g.c_out, g.oh, g.ow}, kBFloat16);
  const Tensor b16 = bias.defined() ? to_dtype(contiguous(bias), kBFloat16) : Tensor();
  gemm_bf16<BFloat16>(false, /*trans_b=*/true, np, g.c_out, g.c_in,
                      channels_last_rows(xs).data_ptr<BFloat16>(), g.c_in, wc.data_ptr<BFloat16>(),
                      g.c_in, 0.0f, channels_last_rows(y).data_ptr<BFloat16>(), g.c_out,
                      b16.defined() ? b16.data_ptr<BFloat16>() : nullptr);
  return y;
}

std::tuple<Tensor, Tensor, Tensor> backward_channels_last(
    const ConvGeometry& g, const Tensor& gy, const ConvBf16SavedInput& x, const Tensor& w,
    ScalarType gx_dtype, bool need_input, bool need_weight, bool need_bias,
    const Tensor& sum_into) {
  const Tensor g_y = channels_last(gy);  // (N, C_out, oH, oW)
  const Tensor dy = channels_last_rows(g_y);     // (N P, C_out)
  const int64_t np = g.n * g.oh * g.ow;
  Tensor gx, gw, gb;
  if (need_input) {
    profiler::Scope prof("conv2d_bf16.backward_data_gemm");
    const Tensor wc = contiguous(w);  // (C_out, C_in)
    // At the strided pixels; or the waiting gradient itself, summed into by the GEMM
    // (Note [bf16 convolution gradients summed in place], stride 1 only).
    Tensor gxs = sum_into.defined() ? sum_into
                                    : empty_channels_last({g.n, g.c_in, g.oh, g.ow}, gx_dtype);
    const float beta = sum_into.defined() ? 1.0f : 0.0f;
    dispatch_floating_bf16(gx_dtype, "conv2d_bf16_backward", [&]<class S, class C>() {
      if constexpr (!std::is_same_v<S, double>) {
        gemm_bf16<S>(false, false, np, g.c_in, g.c_out, dy.data_ptr<BFloat16>(), g.c_out,
                     wc.data_ptr<BFloat16>(), g.c_in, beta, channels_last_rows(gxs).data_ptr<S>(), g.c_in);
        if (strided(g)) {
          gx = empty_channels_last({g.n, g.c_in, g.h, g.w}, gx_dtype);
          scatter_channels_last<S>(g, gxs, gx);
        } else {
          gx = gxs;
        }
      }
    });
  }
  if (need_weight) {
    profiler::Scope prof("conv2d_bf16.backward_weights_gemm");
    LS_CHECK(x.plain.defined(), "conv2d_bf16_backward: the 1x1 path needs its saved image");
    const Tensor xc = channels_last(x.plain);
    // The saved image may be the full one (saved by the reference path): subsample it here.
    const Tensor xs = x.subsampled || !strided(g) ? xc : subsample_channels_last(g, xc);
    gw = empty({g.c_out, g.c_in, 1, 1}, kFloat32);  // (C_out, C_in)
    gemm_bf16<float>(/*trans_a=*/true, false, g.c_out, g.c_in, np, dy.data_ptr<BFloat16>(),
                     g.c_out, channels_last_rows(xs).data_ptr<BFloat16>(), g.c_in, 0.0f,
                     gw.data_ptr<float>(), g.c_in);
  }
  if (need_bias) gb = sum_rows_to_float(dy);  // (C_out)
  return {gx, gw, gb};
}

}  // namespace

Tensor conv_bf16_channels_major(const BFloat16* src, int64_t n, int64_t c, int64_t p) {
  Tensor out = empty({c, n * p}, kBFloat16);
  BFloat16* dst = out.data_ptr<BFloat16>();
  parallel_for(0, c, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t ch = lo; ch < hi; ++ch) {
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(dst + (ch * n + i) * p, src + (i * c + ch) * p, p * sizeof(BFloat16));
      }
    }
  });
  return out;
}

Tensor conv2d_bf16_pointwise_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                                     const Tensor& bias, ConvBf16SavedInput* saved) {
  profiler::Scope prof("conv2d_bf16.forward_gemm");
  if (conv_bf16_returns_channels_last(g, x)) return forward_channels_last(g, x, w, bias, saved);
  const Tensor x16 = contiguous(to_dtype(x, kBFloat16));  // (N, C_in, H, W)
  const Tensor xs = strided(g) ? subsample(g, x16) : x16;  // (N, C_in, oH, oW)
  if (saved != nullptr) *saved = ConvBf16SavedInput{Tensor(), xs, strided(g), xs.is_same(x)};
  const Tensor wc = contiguous(w);  // (C_out, C_in)
  const int64_t p = g.oh * g.ow;
  Tensor y = empty({g.n, g.c_out, g.oh, g.ow}, kBFloat16);
  float beta = 0.0f;
  if (bias.defined()) {  // every pixel starts as its channel's bias
    const Tensor b = contiguous(bias);
    const float* bp = b.data_ptr<float>();
    BFloat16* yp = y.data_ptr<BFloat16>();
    for (int64_t i = 0; i < g.n * g.c_out; ++i) {
      const BFloat16 v(bp[i % g.c_out]);
      for (int64_t j = 0; j < p; ++j) yp[i * p + j] = v;
    }
    beta = 1.0f;
  }
  const std::vector<int64_t> zero(static_cast<size_t>(g.n), 0);
  const std::vector<int64_t> x_off = image_offsets(g.n, g.c_in * p), y_off = image_offsets(g.n, g.c_out * p);
  gemm_bf16_batched<BFloat16>(g.n, false, false, g.c_out, p, g.c_in, wc.data_ptr<BFloat16>(),
                              zero.data(), g.c_in, xs.data_ptr<BFloat16>(), x_off.data(), p, beta,
                              y.data_ptr<BFloat16>(), y_off.data(), p);
  return y;
}

std::tuple<Tensor, Tensor, Tensor> conv2d_bf16_pointwise_backward(
    const ConvGeometry& g, const Tensor& g_y, const ConvBf16SavedInput& x, const Tensor& w,
    ScalarType gx_dtype, bool need_input, bool need_weight, bool need_bias,
    const Tensor& sum_into) {
  if (stored_channels_last(g_y)) {
    return backward_channels_last(g, g_y, x, w, gx_dtype, need_input, need_weight, need_bias,
                                  sum_into);
  }
  LS_CHECK(!sum_into.defined(), "conv2d_bf16_pointwise_backward: sum_into needs a channels-last gy");
  const Tensor gy_c = contiguous(g_y);  // (N, C_out, oH, oW)
  const int64_t p = g.oh * g.ow;
  const std::vector<int64_t> zero(static_cast<size_t>(g.n), 0);
  const std::vector<int64_t> y_off = image_offsets(g.n, g.c_out * p);
  const BFloat16* gyp = gy_c.data_ptr<BFloat16>();
  Tensor gx, gw, gb;
  if (need_input) {
    profiler::Scope prof("conv2d_bf16.backward_data_gemm");
    const Tensor wc = contiguous(w);
    Tensor gxs = empty({g.n, g.c_in, g.oh, g.ow}, gx_dtype);  // dX at the strided pixels
    const std::vector<int64_t> x_off = image_offsets(g.n, g.c_in * p);
    dispatch_floating_bf16(gx_dtype, "conv2d_bf16_backward", [&]<class S, class C>() {
      if constexpr (!std::is_same_v<S, double>) {
        gemm_bf16_batched<S>(g.n, /*trans_a=*/true, false, g.c_in, p, g.c_out,
                             wc.data_ptr<BFloat16>(), zero.data(), g.c_in, gyp, y_off.data(), p,
                             0.0f, gxs.data_ptr<S>(), x_off.data(), p);
        if (!strided(g)) {
          gx = gxs;
          return;
        }
        gx = zeros({g.n, g.c_in, g.h, g.w}, gx_dtype);
        const S* src = gxs.data_ptr<S>();
        S* dst = gx.data_ptr<S>();
        for (int64_t plane = 0; plane < g.n * g.c_in; ++plane) {
          for (int64_t i = 0; i < g.oh; ++i) {
            for (int64_t j = 0; j < g.ow; ++j) {
              dst[plane * g.h * g.w + i * g.stride_h * g.w + j * g.stride_w] = src[plane * p + i * g.ow + j];
            }
          }
        }
      }
    });
  }
  if (need_weight) {
    profiler::Scope prof("conv2d_bf16.backward_weights_gemm");
    LS_CHECK(x.plain.defined(), "conv2d_bf16_backward: the 1x1 path needs its saved image");
    // The saved image may be the full one (saved by the reference path): subsample it here.
    const Tensor xs = x.subsampled || !strided(g) ? contiguous(x.plain) : subsample(g, contiguous(x.plain));
    gw = empty({g.c_out, g.c_in, 1, 1}, kFloat32);  // (C_out, C_in), summed over the images
    const BFloat16* xp = xs.data_ptr<BFloat16>();
    if (p < kOneGemmPixels && g.n > 1) {  // Note [bf16 1x1 backward-weights over the batch]
      const Tensor gyt = conv_bf16_channels_major(gyp, g.n, g.c_out, p);  // (C_out, N P)
      const Tensor xt = conv_bf16_channels_major(xp, g.n, g.c_in, p);     // (C_in, N P)
      gemm_bf16<float>(false, /*trans_b=*/true, g.c_out, g.c_in, g.n * p, gyt.data_ptr<BFloat16>(),
                       g.n * p, xt.data_ptr<BFloat16>(), g.n * p, 0.0f, gw.data_ptr<float>(), g.c_in);
    } else {
      for (int64_t n = 0; n < g.n; ++n) {
        gemm_bf16<float>(false, /*trans_b=*/true, g.c_out, g.c_in, p, gyp + n * g.c_out * p, p,
                         xp + n * g.c_in * p, p, n == 0 ? 0.0f : 1.0f, gw.data_ptr<float>(), g.c_in);
      }
    }
  }
  if (need_bias) gb = sum(to_dtype(gy_c, kFloat32), {0, 2, 3}, false);  // (C_out)
  return {gx, gw, gb};
}

}  // namespace lockstep::native
