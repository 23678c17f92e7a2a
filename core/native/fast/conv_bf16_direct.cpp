// core/native/fast/conv_bf16_direct.cpp — bfloat16 convolutions over one to three input channels,
// as direct loops.
//
// § Note [bf16 direct convolution for few input channels]
// A network's first layer reads a grey or RGB image: C_in kH kW, the taps that
// sum into one output, is 9 or 27, so the layer is cheap arithmetic on a large
// output, and memory decides its speed. oneDNN 2.6 has no AMX kernel for it
// (a 3x3 1 -> 32 layer runs jit_bf16:avx512_core_bf16 forward, writing the
// blocked aBcd16b layout we then reorder to NCHW, and jit:amx backward-weights
// reading an NHWC copy of the gradient), and on the Fashion-MNIST SmallCNN's
// first layer the reorders cost about as much as the passes themselves
// (docs/results/kernel_choices.md). Here every pass
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
// § Note [bf16 direct weight gradient in pairs]
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
// § Note [bf16 direct convolution, channels-last output]
// Under the rule of conv_bf16_returns_channels_last (a first layer starts the
// channels-last chain) the forward writes (N, oH, oW, C_out) rows. With
// AVX-512 it computes them in that order: for 4 pixels of an output row and 32
// channels at a time, bias + sum over taps of w[:, t] x[t] (the image value
// broadcast, tap order, one FMA each: the bits of the NCHW planes above), rounded
// and stored as rows; faster than the planes even where there is no transpose
// to pay (docs/results/kernel_choices.md). Without it, the NCHW planes are made
// channels-last by copy_'s transpose. The weight
// gradient reads a channels-last gradient image by image, its channels
// transposed into planes in cache, then sums as before (same bits as from NCHW);
// backward-data takes the gradient made NCHW and returns dx in dy's order.
// In the Fashion-MNIST SmallCNN this takes the 32 -> 64 layer's activation and
// gradient reorders away: that layer's oneDNN passes, the
// ReLUs and the 2x2 pools between them all run channels-last.
//
// Read before: core/native/conv_bf16.h. Read next: core/native/fast/conv_bf16_direct_loops.h,
// core/native/fast/conv_bf16_direct_backward.cpp.
#include <vector>

#include "core/env_flag.h"
#include "core/native/bf16_rows.h"
#include "core/native/conv_bf16.h"
#include "core/native/fast/conv_bf16_direct_loops.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/profiler.h"

namespace lockstep::native {

using namespace direct_loops;  // NOLINT: the loops this file is written in

namespace {

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

}  // namespace lockstep::native
