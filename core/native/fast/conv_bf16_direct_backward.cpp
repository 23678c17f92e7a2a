// core/native/fast/conv_bf16_direct_backward.cpp — the backward of the bf16 direct convolutions.
//
// Backward-weights and backward-data of the first-layer convolutions of
// conv_bf16_direct.cpp, on the loops of conv_bf16_direct_loops.h: the formulas
// are those of Note [bf16 direct convolution for few input channels], the
// weight gradient's dot products in bf16 pairs where the CPU has AVX-512-BF16
// (Note [bf16 direct weight gradient in pairs]), a channels-last gradient read
// image by image (Note [bf16 direct convolution, channels-last output]).
// Read before: core/native/fast/conv_bf16_direct.cpp. Read next: core/native/fast/conv_bf16_weight_grad.cpp.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/native/bf16_rows.h"
#include "core/native/conv_bf16.h"
#include "core/native/fast/conv_bf16_direct_loops.h"
#include "core/native/fast/transpose_tiles.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/profiler.h"

namespace lockstep::native {

using namespace direct_loops;  // NOLINT: the loops this file is written in

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

