// core/native/fast/conv_bf16_direct.cpp — bfloat16 convolutions over one to three input channels,
// as direct loops.
//
// Note [bf16 direct convolution for few input channels]
// A network's first layer reads a grey or RGB image: C_in kH kW, the taps that
// sum into one output, is 9 or 27, so the layer is cheap arithmetic on a large
// output, and memory decides its speed. oneDNN 2.6 has no AMX kernel for it
// (a 3x3 1 -> 32 layer runs jit_bf16:avx512_core_bf16 forward, writing the
// blocked aBcd16b layout we then reorder to NCHW, and jit:amx backward-weights
// reading an NHWC copy of the gradient): at batch 64, 28x28, one thread, the
// Fashion-MNIST SmallCNN's first layer took 1.0 ms forward + 0.86 ms reorder,
// and 0.67 ms of gradient reorder + 1.46 ms backward-weights. Here every pass
// is a loop over NCHW planes in float32, with no reorder:
//   forward          y[n, o] = b[o] + sum_(c, i, j) w[o, c, i, j] xpad[n, c](i.., j..)
//   backward-weights dW[o, c, i, j] = sum_n <dy[n, o], xpad[n, c](i.., j..)>
//   backward-data    dx[n, c] = sum_(o, i, j) w[o, c, i, j] dypad[n, o](kH-1-i.., kW-1-j..)
// where xpad is the image widened to float32 with its zero padding written out
// (so every tap is a plain shifted row, vectorised along the row), and dypad the
// gradient padded by kH - 1 - pH, kW - 1 - pW (stride 1: the backward-data pass is
// the full correlation with the flipped kernel). Each output plane accumulates
// in a float32 buffer in cache, in tap order, and is rounded to bf16 once; dW
// sums each image's dot products in double, images in order, so the result does
// not depend on the thread count. Taken for stride 1, dilation 1, groups 1,
// padding below the kernel size and C_in kH kW <= kMaxTaps;
// LOCKSTEP_BF16_DIRECT_CONV=0 sends these layers to oneDNN (benchmarks).
//
// Note [bf16 direct weight gradient in pairs]
// Where the CPU has AVX-512-BF16, the weight gradient's dot products read the
// bf16 gradient and the padded bf16 image as they are and sum them with
// vdpbf16ps: each lane adds two exact products (pixels 2i and 2i + 1 of a run
// of 32) in float32, so the planes stay half the bytes, no widening pass runs
// and there are half as many instructions. The sums are grouped as before
// (per image, float32 lanes added into double lanes, images in order), so the
// result still does not depend on the thread count; vdpbf16ps treats subnormal
// inputs and results as zero, a difference far below the 1e-4 the test allows
// against the float32 reference. Without the instruction the planes are float32.
//
// Note [bf16 direct convolution, channels-last output]
// Under the rule of conv_bf16_returns_channels_last (a first layer starts the
// channels-last chain) the forward writes (N, oH, oW, C_out) rows. With
// AVX-512 it computes them in that order: for 4 pixels of an output row and 32
// channels at a time, bias + sum over taps of w[:, t] x[t] (the image value
// broadcast, tap order, one FMA each: the bits of the NCHW planes above), rounded
// and stored as rows; 35% faster than the planes at batch 64, 1 -> 32 at 28x28,
// where there is no transpose to pay. Without it, the NCHW planes are made
// channels-last by copy_'s transpose. The weight
// gradient reads a channels-last gradient image by image, its channels
// transposed into planes in cache, then sums as before (same bits as from NCHW);
// backward-data takes the gradient made NCHW and returns dx in dy's order.
// In the Fashion-MNIST SmallCNN this takes the 32 -> 64 layer's activation and
// gradient reorders (7% of a bf16 step) away: that layer's oneDNN passes, the
// ReLUs and the 2x2 pools between them all run channels-last.
//
// Read before: core/native/conv_bf16.h. Read next: core/native/fast/conv_bf16_weight_grad.cpp.
#include <algorithm>
#include <cstring>
#if defined(__AVX512BF16__) || defined(__AVX512BW__)
#include <immintrin.h>
#endif
#include <type_traits>
#include <vector>

#include "core/env_flag.h"
#include "core/native/bf16_rows.h"
#include "core/native/conv_bf16.h"
#include "core/native/fast/transpose_tiles.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/profiler.h"

namespace lockstep::native {

namespace {

constexpr int64_t kMaxTaps = 27;  // 3 x 3 over RGB
constexpr int64_t kTapGroup = 4;  // weight-gradient taps summed in one pass over the gradient

// A contiguous (N, C, H, W) bf16 or float32 tensor as `out_dtype` (float32, or
// bf16 from a bf16 tensor) with pad_h / pad_w zero rows and columns on each
// side, as a flat buffer of N C (H + 2 pad_h)(W + 2 pad_w) values and `slack`
// zeros after them (the wide loops below read a little past the last plane).
Tensor padded(const Tensor& t, int64_t pad_h, int64_t pad_w, int64_t slack,
              ScalarType out_dtype = kFloat32) {
  const int64_t n = t.size(0), c = t.size(1), h = t.size(2), w = t.size(3);
  const int64_t hp = h + 2 * pad_h, wp = w + 2 * pad_w;
  Tensor out = zeros({n * c * hp * wp + slack}, out_dtype);
  const bool bf16 = t.dtype() == kBFloat16;
  const BFloat16* s16 = bf16 ? t.data_ptr<BFloat16>() : nullptr;
  const float* s32 = bf16 ? nullptr : t.data_ptr<float>();
  float* o32 = out_dtype == kFloat32 ? out.data_ptr<float>() : nullptr;
  BFloat16* o16 = out_dtype == kFloat32 ? nullptr : out.data_ptr<BFloat16>();
  parallel_for(0, n * c, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t plane = lo; plane < hi; ++plane) {
      for (int64_t y = 0; y < h; ++y) {
        const int64_t row = (plane * hp + y + pad_h) * wp + pad_w, at = (plane * h + y) * w;
        if (o16 != nullptr) {
          std::copy_n(s16 + at, w, o16 + row);
        } else if (bf16) {
          widen_bf16(s16 + at, o32 + row, w);
        } else {
          std::copy_n(s32 + at, w, o32 + row);
        }
      }
    }
  });
  return out;
}

// The wide form: an output plane (rows, cols) of a stride-1 correlation over a
// padded plane `width` wide is computed at width columns per row, the last
// width - cols of them junk that is never read out, so each tap is one
// contiguous run of len = rows * width values instead of `rows` short rows (a
// 28-wide row is one vector and a scalar tail of 12).

// 16 float32 lanes (GCC / Clang vector extension: one AVX-512 register here, two
// or four narrower ones elsewhere), loaded and stored unaligned.
using Vec = float __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;
constexpr int64_t kVecs = 8;                // registers of a block
constexpr int64_t kBlock = kVecs * kLanes;  // the wide planes are whole blocks long
inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, const Vec& v) { std::memcpy(p, &v, sizeof v); }

// acc[q] = init + sum_t v[t] src[off[t] + q] for q < len (a multiple of kBlock),
// taps in order; each block of kBlock outputs stays in kVecs registers across
// the taps (eight independent FMA chains: enough to cover the FMA latency).
inline void sum_taps(float* __restrict acc, const float* __restrict src, const int64_t* off,
                     const float* v, int64_t taps, float init, int64_t len) {
  for (int64_t q = 0; q < len; q += kBlock) {
    Vec a[kVecs];
#pragma GCC unroll 8
    for (int64_t k = 0; k < kVecs; ++k) a[k] = Vec{} + init;
    for (int64_t t = 0; t < taps; ++t) {
      const float* s = src + off[t] + q;
      const Vec w = Vec{} + v[t];
#pragma GCC unroll 8
      for (int64_t k = 0; k < kVecs; ++k) a[k] += w * load(s + k * kLanes);
    }
#pragma GCC unroll 8
    for (int64_t k = 0; k < kVecs; ++k) store(acc + q + k * kLanes, a[k]);
  }
}

// For the kTaps taps t < kTaps: out[t] = sum_q a[q] src[off[t] + q] over q < len
// (a multiple of kBlock), as kLanes partial sums (lane k sums the q = k mod
// kLanes). The taps share each load of `a`.
template <int kTaps>
void dot_taps(const float* __restrict a, const float* __restrict src, const int64_t* off,
              int64_t len, Vec* out) {
  Vec p[kTaps][2] = {};
  for (int64_t q = 0; q < len; q += 2 * kLanes) {
    const Vec a0 = load(a + q), a1 = load(a + q + kLanes);
#pragma GCC unroll 4
    for (int t = 0; t < kTaps; ++t) {
      p[t][0] += a0 * load(src + off[t] + q);
      p[t][1] += a1 * load(src + off[t] + q + kLanes);
    }
  }
  for (int t = 0; t < kTaps; ++t) out[t] = p[t][0] + p[t][1];
}

#if defined(__AVX512BF16__)
// dot_taps on bf16 planes (Note [bf16 direct weight gradient in pairs]): the
// same sums, two products at a time per lane by vdpbf16ps, each product exact
// in float32. len is a multiple of 64.
template <int kTaps>
void dot_taps(const BFloat16* __restrict a, const BFloat16* __restrict src, const int64_t* off,
              int64_t len, Vec* out) {
  __m512 p[kTaps][2];
  for (int t = 0; t < kTaps; ++t) p[t][0] = p[t][1] = _mm512_setzero_ps();
  for (int64_t q = 0; q < len; q += 64) {
    const auto a0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(a + q));
    const auto a1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(a + q + 32));
#pragma GCC unroll 4
    for (int t = 0; t < kTaps; ++t) {
      const BFloat16* s = src + off[t] + q;
      p[t][0] = _mm512_dpbf16_ps(p[t][0], a0, reinterpret_cast<__m512bh>(_mm512_loadu_si512(s)));
      p[t][1] =
          _mm512_dpbf16_ps(p[t][1], a1, reinterpret_cast<__m512bh>(_mm512_loadu_si512(s + 32)));
    }
  }
  for (int t = 0; t < kTaps; ++t) {
    const __m512 sum = _mm512_add_ps(p[t][0], p[t][1]);
    std::memcpy(&out[t], &sum, sizeof sum);
  }
}
// The planes of the weight gradient: bf16 where vdpbf16ps exists.
using WgradPlane = BFloat16;
#else
using WgradPlane = float;
#endif

// A bf16 gradient row into a wide plane of float32 (widened) or bf16 (copied).
inline void place_row(const BFloat16* src, float* dst, int64_t m) { widen_bf16(src, dst, m); }
inline void place_row(const BFloat16* src, BFloat16* dst, int64_t m) {
#if defined(__AVX512BW__)
  for (int64_t j = 0; j < m; j += 32) {  // masked: a 28-wide row is one step, no memmove call
    const __mmask32 k = m - j >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << (m - j)) - 1u);
    _mm512_mask_storeu_epi16(dst + j, k, _mm512_maskz_loadu_epi16(k, src + j));
  }
#else
  std::copy_n(src, m, dst);
#endif
}

// rows x cols of a wide plane (rows `width` apart) into a dense bf16 or float32
// plane, row by row (bf16: each row rounded straight into place, one full and
// one masked AVX-512 step for a 28-wide row, Note [bfloat16 rows in AVX-512]).
template <class T>
void write_dense(const float* wide, int64_t rows, int64_t cols, int64_t width, T* out) {
  for (int64_t r = 0; r < rows; ++r) {
    if constexpr (std::is_same_v<T, BFloat16>) {
      round_to_bf16(wide + r * width, out + r * cols, cols);
    } else {
      std::copy_n(wide + r * width, cols, out + r * cols);
    }
  }
}

// Where tap (c, i, j) of an image's window starts, from its padded image
// (C_in planes of hp x wp): plane c, row i, column j.
std::vector<int64_t> tap_offsets(const ConvGeometry& g, int64_t hp, int64_t wp) {
  std::vector<int64_t> off(g.c_in * g.kh * g.kw);
  for (int64_t t = 0; t < static_cast<int64_t>(off.size()); ++t) {
    off[t] = ((t / (g.kh * g.kw)) * hp + (t / g.kw) % g.kh) * wp + t % g.kw;
  }
  return off;
}

#if LOCKSTEP_BF16_ROWS_AVX512
// Output rows of one image in (oH oW, C_out) order, straight from the padded
// image (Note [bf16 direct convolution, channels-last output]): for kPix pixels
// of a row at a time and 32 channels (two registers, the last pair masked), acc
// = bias + sum_t wt[t] x[t] in tap order, one FMA per tap and register, the
// image's value broadcast. wt is (taps, C_out): tap t's weights for every channel.
constexpr int64_t kPix = 4;
template <int64_t kP>
void direct_pixels_channels_last(const float* image, const int64_t* off, int64_t taps,
                                 const float* wt, const float* bias, int64_t c_out, int64_t q,
                                 BFloat16* out) {
  for (int64_t c0 = 0; c0 < c_out; c0 += 32) {
    const __mmask16 k0 = detail_bf16_rows::lanes(c_out - c0);
    const __mmask16 k1 = c_out - c0 > 16 ? detail_bf16_rows::lanes(c_out - c0 - 16) : 0;
    const __m512 b0 = bias != nullptr ? _mm512_maskz_loadu_ps(k0, bias + c0) : _mm512_setzero_ps();
    const __m512 b1 = bias != nullptr ? _mm512_maskz_loadu_ps(k1, bias + c0 + 16) : _mm512_setzero_ps();
    __m512 a0[kP], a1[kP];
    for (int64_t p = 0; p < kP; ++p) a0[p] = b0, a1[p] = b1;
    for (int64_t t = 0; t < taps; ++t) {
      const __m512 w0 = _mm512_maskz_loadu_ps(k0, wt + t * c_out + c0);
      const __m512 w1 = _mm512_maskz_loadu_ps(k1, wt + t * c_out + c0 + 16);
      const float* src = image + off[t] + q;
#pragma GCC unroll 4
      for (int64_t p = 0; p < kP; ++p) {
        const __m512 v = _mm512_set1_ps(src[p]);
        a0[p] = _mm512_fmadd_ps(w0, v, a0[p]);
        a1[p] = _mm512_fmadd_ps(w1, v, a1[p]);
      }
    }
    for (int64_t p = 0; p < kP; ++p) {
      BFloat16* o = out + p * c_out + c0;
      _mm512_mask_cvtepi32_storeu_epi16(o, k0, detail_bf16_rows::round_lanes(_mm512_castps_si512(a0[p])));
      if (k1 != 0) {
        _mm512_mask_cvtepi32_storeu_epi16(o + 16, k1,
                                          detail_bf16_rows::round_lanes(_mm512_castps_si512(a1[p])));
      }
    }
  }
}
#endif

}  // namespace

bool conv_bf16_is_direct(const ConvGeometry& g) {
  static const bool enabled = env_flag("LOCKSTEP_BF16_DIRECT_CONV", true);
  // The loops pad both sides alike: the output must be the floor rule's (not a
  // caller's choice with another right padding, as conv_bf16_input_grad.cpp makes).
  const bool symmetric = g.oh == g.h + 2 * g.pad_h - g.kh + 1 && g.ow == g.w + 2 * g.pad_w - g.kw + 1;
  return enabled && g.groups == 1 && g.stride_h == 1 && g.stride_w == 1 && g.dil_h == 1 &&
         g.dil_w == 1 && g.pad_h < g.kh && g.pad_w < g.kw && symmetric &&
         g.c_in * g.kh * g.kw <= kMaxTaps;
}

Tensor conv2d_bf16_direct_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                                  const Tensor& bias, ConvBf16SavedInput* saved) {
  profiler::Scope prof("conv2d_bf16.direct_forward");
  const Tensor xc = contiguous(x);
  if (saved != nullptr) {  // a private bf16 copy: a later in-place change of x cannot reach it
    const Tensor x16 = to_dtype(xc, kBFloat16);
    *saved = ConvBf16SavedInput{Tensor(), x16.is_same(x) ? clone(x16) : x16};
  }
  const int64_t hp = g.h + 2 * g.pad_h, wp = g.w + 2 * g.pad_w;
  const Tensor xp = padded(xc, g.pad_h, g.pad_w, g.kw + kBlock);  // (N, C_in, Hp, Wp), flat
  const Tensor wf = contiguous(to_dtype(w, kFloat32));            // (C_out, C_in kH kW)
  const Tensor bf = bias.defined() ? contiguous(bias) : Tensor();
  const int64_t taps = g.c_in * g.kh * g.kw;
  const int64_t len = (g.oh * wp + kBlock - 1) / kBlock * kBlock;  // wide output plane (oH, Wp)
  const std::vector<int64_t> off = tap_offsets(g, hp, wp);
  const float* xpp = xp.data_ptr<float>();
  const float* wfp = wf.data_ptr<float>();
  const float* bp = bf.defined() ? bf.data_ptr<float>() : nullptr;
  const bool rows_out = conv_bf16_returns_channels_last(g, x);
#if LOCKSTEP_BF16_ROWS_AVX512
  if (rows_out) {  // Note [bf16 direct convolution, channels-last output]
    Tensor y = empty_channels_last({g.n, g.c_out, g.oh, g.ow}, kBFloat16);
    BFloat16* yp = channels_last_rows(y).data_ptr<BFloat16>();
    std::vector<float> wt(taps * g.c_out);  // (taps, C_out)
    for (int64_t o = 0; o < g.c_out; ++o) {
      for (int64_t t = 0; t < taps; ++t) wt[t * g.c_out + o] = wfp[o * taps + t];
    }
    parallel_for(0, g.n * g.oh, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {  // r = image * oH + oy
        const int64_t n = r / g.oh, oy = r % g.oh;
        const float* image = xpp + n * g.c_in * hp * wp;
        BFloat16* row = yp + r * g.ow * g.c_out;
        int64_t ox = 0;
        for (; ox + kPix <= g.ow; ox += kPix) {
          direct_pixels_channels_last<kPix>(image, off.data(), taps, wt.data(), bp, g.c_out,
                                            oy * wp + ox, row + ox * g.c_out);
        }
        for (; ox < g.ow; ++ox) {
          direct_pixels_channels_last<1>(image, off.data(), taps, wt.data(), bp, g.c_out,
                                         oy * wp + ox, row + ox * g.c_out);
        }
      }
    });
    return y;
  }
#endif
  Tensor y = empty({g.n, g.c_out, g.oh, g.ow}, kBFloat16);
  BFloat16* yp = y.data_ptr<BFloat16>();
  parallel_for(0, g.n * g.c_out, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> acc(len);
    for (int64_t plane = lo; plane < hi; ++plane) {
      const int64_t n = plane / g.c_out, o = plane % g.c_out;
      sum_taps(acc.data(), xpp + n * g.c_in * hp * wp, off.data(), wfp + o * taps, taps,
               bp != nullptr ? bp[o] : 0.0f, len);
      write_dense(acc.data(), g.oh, g.ow, wp, yp + plane * g.oh * g.ow);
    }
  });
  return rows_out ? channels_last(y) : y;  // without AVX-512: the planes, then copy_'s transpose
}

std::tuple<Tensor, Tensor, Tensor> conv2d_bf16_direct_backward(
    const ConvGeometry& g, const Tensor& gy, const ConvBf16SavedInput& x, const Tensor& w,
    ScalarType gx_dtype, bool need_input, bool need_weight, bool need_bias) {
  const int64_t taps = g.c_in * g.kh * g.kw;
  Tensor gx, gw, gb;
  if (need_input) {
    profiler::Scope prof("conv2d_bf16.direct_backward_data");
    const int64_t eh = g.kh - 1 - g.pad_h, ew = g.kw - 1 - g.pad_w;
    const int64_t hq = g.oh + 2 * eh, wq = g.ow + 2 * ew;           // the padded gradient plane
    const int64_t len = (g.h * wq + kBlock - 1) / kBlock * kBlock;  // wide input plane (H, Wq)
    // (N, C_out, H + kH - 1, W + kW - 1), flat
    const Tensor gyp = padded(contiguous(gy), eh, ew, g.kw + kBlock);
    const Tensor wf = contiguous(to_dtype(w, kFloat32));
    const int64_t taps_t = g.c_out * g.kh * g.kw;  // the transposed taps (o, i, j)
    std::vector<int64_t> off(taps_t);  // tap (o, i, j) reads gradient plane o at the flipped (i, j)
    std::vector<float> wt(g.c_in * taps_t);  // (C_in, C_out kH kW): w[o, c, i, j] at [c][o, i, j]
    const float* wfp = wf.data_ptr<float>();
    for (int64_t t = 0; t < taps_t; ++t) {
      const int64_t o = t / (g.kh * g.kw), i = (t / g.kw) % g.kh, j = t % g.kw;
      off[t] = (o * hq + g.kh - 1 - i) * wq + g.kw - 1 - j;
      for (int64_t c = 0; c < g.c_in; ++c)
        wt[c * taps_t + t] = wfp[((o * g.c_in + c) * g.kh + i) * g.kw + j];
    }
    const float* gpp = gyp.data_ptr<float>();
    gx = empty({g.n, g.c_in, g.h, g.w}, gx_dtype);
    parallel_for(0, g.n * g.c_in, 1, [&](int64_t lo, int64_t hi) {
      std::vector<float> acc(len);
      for (int64_t plane = lo; plane < hi; ++plane) {
        const int64_t n = plane / g.c_in, c = plane % g.c_in;
        sum_taps(acc.data(), gpp + n * g.c_out * hq * wq, off.data(), wt.data() + c * taps_t,
                 taps_t, 0.0f, len);
        if (gx_dtype == kBFloat16) {
          write_dense(acc.data(), g.h, g.w, wq, gx.data_ptr<BFloat16>() + plane * g.h * g.w);
        } else {
          write_dense(acc.data(), g.h, g.w, wq, gx.data_ptr<float>() + plane * g.h * g.w);
        }
      }
    });
  }
  if (need_weight || need_bias) {
    profiler::Scope prof("conv2d_bf16.direct_backward_weights");
    LS_CHECK(x.plain.defined() && !x.subsampled,
             "conv2d_bf16_backward: the direct path needs its "
             "saved image (this one was saved by another path)");
    const int64_t hp = g.h + 2 * g.pad_h, wp = g.w + 2 * g.pad_w;
    // The wide gradient plane (oH, Wp), rounded up to whole blocks; its junk is 0.
    const int64_t len = (g.oh * wp + kBlock - 1) / kBlock * kBlock;
    using P = WgradPlane;  // Note [bf16 direct weight gradient in pairs]
    const Tensor xp = padded(contiguous(x.plain), g.pad_h, g.pad_w, g.kw + kBlock,
                             std::is_same_v<P, float> ? kFloat32 : kBFloat16);
    const P* xpp = xp.data_ptr<P>();
    const bool rows_in = is_channels_last(gy);
    const Tensor gyd = rows_in ? channels_last_rows(gy) : contiguous(gy);
    const BFloat16* gyp = gyd.data_ptr<BFloat16>();
    gw = empty({g.c_out, g.c_in, g.kh, g.kw}, kFloat32);
    gb = empty({g.c_out}, kFloat32);
    float* gwp = gw.data_ptr<float>();
    float* gbp = gb.data_ptr<float>();
    const std::vector<int64_t> off = tap_offsets(g, hp, wp);
    const int64_t ohw = g.oh * g.ow;
    // A channels-last gradient is read image by image: the thread's channels of
    // image n transposed into planes in cache (Note [bf16 direct convolution,
    // channels-last output]); the sums are the same, in the same order.
    parallel_for(0, g.c_out, 1, [&](int64_t lo, int64_t hi) {
      std::vector<P> dy(len, P(0.0f));  // one gradient plane, wide: its junk columns stay 0
      // Per channel and tap, kLanes partial sums in double: each image's float32
      // lane sums are added here, images in order (no per-image horizontal sum).
      std::vector<double> lanes((hi - lo) * taps * kLanes, 0.0), bias_sum(hi - lo, 0.0);
      std::vector<BFloat16> planes(rows_in ? (hi - lo) * ohw : 0);  // (hi - lo, oH oW)
      for (int64_t n = 0; n < g.n; ++n) {
        const BFloat16* block = gyp + (n * g.c_out + lo) * ohw;  // channel lo's plane of image n
        if (rows_in) {
          const BFloat16* rows = gyp + n * ohw * g.c_out + lo;  // (oH oW, C_out) rows
          if (!detail::transpose_block(rows, g.c_out, planes.data(), ohw, hi - lo, ohw,
                                       sizeof(BFloat16))) {
            for (int64_t o = 0; o < hi - lo; ++o) {
              for (int64_t q = 0; q < ohw; ++q) planes[o * ohw + q] = rows[q * g.c_out + o];
            }
          }
          block = planes.data();
        }
        for (int64_t o = lo; o < hi; ++o) {
          const BFloat16* plane = block + (o - lo) * ohw;
          for (int64_t r = 0; r < g.oh; ++r) {
            place_row(plane + r * g.ow, dy.data() + r * wp, g.ow);
          }
          float plane_sum = 0.0f;
#pragma omp simd reduction(+ : plane_sum)
          for (int64_t p = 0; p < ohw; ++p) plane_sum += static_cast<float>(plane[p]);
          bias_sum[o - lo] += plane_sum;
          const P* image = xpp + n * g.c_in * hp * wp;
          double* lanes_o = lanes.data() + (o - lo) * taps * kLanes;
          for (int64_t t = 0; t < taps; t += kTapGroup) {  // tap groups of 4, then the rest
            Vec part[kTapGroup];
            const int64_t m = std::min(kTapGroup, taps - t);
            if (m == 4) dot_taps<4>(dy.data(), image, off.data() + t, len, part);
            if (m == 3) dot_taps<3>(dy.data(), image, off.data() + t, len, part);
            if (m == 2) dot_taps<2>(dy.data(), image, off.data() + t, len, part);
            if (m == 1) dot_taps<1>(dy.data(), image, off.data() + t, len, part);
            for (int64_t u = 0; u < m; ++u) {
              double* lane = lanes_o + (t + u) * kLanes;
#pragma omp simd
              for (int64_t k = 0; k < kLanes; ++k) lane[k] += part[u][k];
            }
          }
        }
      }
      for (int64_t o = lo; o < hi; ++o) {
        const double* lanes_o = lanes.data() + (o - lo) * taps * kLanes;
        for (int64_t t = 0; t < taps; ++t) {
          double sum = 0.0;
          for (int64_t k = 0; k < kLanes; ++k) sum += lanes_o[t * kLanes + k];
          gwp[o * taps + t] = static_cast<float>(sum);
        }
        gbp[o] = static_cast<float>(bias_sum[o - lo]);
      }
    });
    if (!need_weight) gw = Tensor();
    if (!need_bias) gb = Tensor();
  }
  if (gx.defined() && is_channels_last(gy)) gx = channels_last(gx);  // dx takes dy's order
  return {gx, gw, gb};
}

}  // namespace lockstep::native
