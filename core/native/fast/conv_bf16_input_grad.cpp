// core/native/fast/conv_bf16_input_grad.cpp — the input gradient of a bf16 convolution
// as forward convolutions of the output gradient.
//
// § Note [bf16 input gradient as a forward convolution]
// For stride 1 (dilation 1, one group) the input gradient is itself a
// convolution, of the output gradient with the kernel transposed and flipped:
//   dx[n, c, y, x] = sum_(o, i, j) dy[n, o, y + pH - i, x + pW - j] w[o, c, i, j]
//                  = conv(dy, w')[n, c, y, x],  w'[c, o, i, j] = w[o, c, kH-1-i, kW-1-j],
// with padding kH - 1 - pH, kW - 1 - pW (the output is H x W again). At stride s
// the rows y = s m + r of dx (one phase per r, along each axis) read only the
// taps i = first + s u with first = (r + pH) mod s: each phase is a stride-1
// forward convolution of dy with those taps, reversed, and its own padding
// (phase_of below); a 3x3 stride-2 layer's four phases have kernels 1x1 (a GEMM),
// 1x2, 2x1 and 2x2, the same products as the forward pass, and their outputs are
// interleaved into dx. oneDNN 2.6 runs the forward pass on AMX as brgconv but the
// backward-data pass as the older jit:avx512_core_amx_bf16 kernel, which is
// slower, most of all at stride 2: on ResNet50's 3x3 layers the phases were
// faster on every layer, two to three times on the strided ones, about half the
// seven layers' time per step (docs/results/kernel_choices.md). Each phase's
// kernel is made per call from the bf16 weight (each (o, c) block of taps picked
// and reversed, in memory order) and handed to the oneDNN forward as a transposed
// view, which its weight reorder reads in place (weight_memory, conv_bf16.cpp).
// Same products, another order of the sums: compared with the float32 reference
// at the tolerance of the other bf16 passes (tests/core/test_channels_last.cpp),
// with a 3x5 kernel at strides 1, (2, 2) and (2, 3). dx comes back in dy's order,
// as from every bf16 pass. LOCKSTEP_BF16_DGRAD_FORWARD=0 keeps every layer on the
// primitive (A/B runs).
//
// Read before: core/native/conv_bf16.h. Read next: core/native/fast/conv_bf16_weight_grad.cpp.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/env_flag.h"
#include "core/native/conv_bf16.h"
#include "core/native/fast/onednn_engine.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/profiler.h"

namespace lockstep::native {

namespace {

// Along one axis (kernel k, stride s, padding p, input size n), the input rows
// y = s m + r (Note [bf16 input gradient as a forward convolution]) take the taps
// i = first + s u; as a forward correlation over dy that is `taps` taps, flipped,
// with `pad` rows of zeros before dy, giving `size` rows.
struct Phase {
  int64_t first, taps, pad, size;
};

Phase phase_of(int64_t r, int64_t s, int64_t k, int64_t p, int64_t n) {
  const int64_t first = (r + p) % s;
  const int64_t taps = first < k ? (k - first + s - 1) / s : 0;
  const int64_t shift = (r + p - first) / s;  // dx row m reads dy rows m + shift - u
  return {first, taps, taps - 1 - shift, r < n ? (n - r + s - 1) / s : 0};
}

// The forward convolution of dy whose output is phase (ry, rx) of g's input gradient.
ConvGeometry phase_geometry(const ConvGeometry& g, const Phase& py, const Phase& px) {
  ConvGeometry t = g;
  t.c_in = g.c_out;
  t.c_out = g.c_in;
  t.h = g.oh;
  t.w = g.ow;
  t.kh = py.taps;
  t.kw = px.taps;
  t.stride_h = t.stride_w = 1;
  t.pad_h = py.pad;
  t.pad_w = px.pad;
  t.oh = py.size;
  t.ow = px.size;
  return t;
}

// Whether the forward convolution t is well formed: padding on both sides at
// least 0 and below the kernel, so each output reads some of dy.
bool valid_phase(const ConvGeometry& t) {
  const int64_t right_h = t.oh - 1 + t.kh - t.h - t.pad_h, right_w = t.ow - 1 + t.kw - t.w - t.pad_w;
  return t.kh > 0 && t.kw > 0 && t.oh > 0 && t.ow > 0 && t.pad_h >= 0 && t.pad_w >= 0 &&
         t.pad_h < t.kh && t.pad_w < t.kw && right_h >= 0 && right_w >= 0 && right_h < t.kh &&
         right_w < t.kw;
}

// The phase's kernel from w (C_out, C_in, kH, kW) bf16: w'[c, o, uy, ux] =
// w[o, c, first_y + sH (Ky - 1 - uy), first_x + sW (Kx - 1 - ux)] (transposed, the taps
// of the phase reversed; for stride 1: w transposed and flipped). Returned as the
// transposed view of a contiguous (C_out, C_in, Ky, Kx) tensor, which the oneDNN
// forward reads in place (weight_memory in conv_bf16.cpp): here only each block of
// taps is picked and reversed, reading and writing memory in order.
Tensor phase_weight(const Tensor& w, const ConvGeometry& g, const Phase& py, const Phase& px) {
  const Tensor wc = contiguous(w);
  const int64_t pairs = g.c_out * g.c_in, taps = g.kh * g.kw, n = py.taps * px.taps;
  std::vector<int64_t> from_tap(static_cast<size_t>(n));
  for (int64_t uy = 0; uy < py.taps; ++uy) {
    for (int64_t ux = 0; ux < px.taps; ++ux) {
      from_tap[uy * px.taps + ux] = (py.first + g.stride_h * (py.taps - 1 - uy)) * g.kw +
                                    px.first + g.stride_w * (px.taps - 1 - ux);
    }
  }
  Tensor out = empty({g.c_out, g.c_in, py.taps, px.taps}, kBFloat16);
  const uint16_t* src = &wc.data_ptr<BFloat16>()->bits;
  uint16_t* dst = &out.data_ptr<BFloat16>()->bits;
  const int64_t* tap = from_tap.data();
  parallel_for(0, pairs, 4096, [=](int64_t lo, int64_t hi) {
    const auto blocks = [&]<int64_t kTaps>() {  // kTaps > 0: the count known here
      const int64_t m = kTaps > 0 ? kTaps : n;
      for (int64_t b = lo; b < hi; ++b) {  // b = o C_in + c
        const uint16_t* from = src + b * taps;
        uint16_t* to = dst + b * m;
#pragma GCC unroll 9
        for (int64_t u = 0; u < m; ++u) to[u] = from[tap[u]];
      }
    };
    if (n == 9) {
      blocks.template operator()<9>();  // 3x3 at stride 1, the common kernel
    } else {
      blocks.template operator()<0>();
    }
  });
  return permute(out, {1, 0, 2, 3});  // (C_in, C_out, Ky, Kx)
}

}  // namespace

bool conv_bf16_input_grad_as_forward(const ConvGeometry& g, const Tensor& gy, ScalarType gx_dtype) {
  static const bool enabled = env_flag("LOCKSTEP_BF16_DGRAD_FORWARD", true);
  // Its phases have asymmetric padding, which only oneDNN's bf16 primitive takes.
  if (!enabled || !onednn_detail::has_bf16() || gx_dtype != kBFloat16 || g.groups != 1 ||
      g.dil_h != 1 || g.dil_w != 1 ||
      g.kh < g.stride_h || g.kw < g.stride_w || !gy.device().is_cpu() ||
      conv_bf16_is_pointwise_gemm(g) || conv_bf16_is_direct(g)) {
    return false;
  }
  for (int64_t ry = 0; ry < g.stride_h; ++ry) {
    for (int64_t rx = 0; rx < g.stride_w; ++rx) {
      const ConvGeometry t =
          phase_geometry(g, phase_of(ry, g.stride_h, g.kh, g.pad_h, g.h),
                         phase_of(rx, g.stride_w, g.kw, g.pad_w, g.w));
      if (!valid_phase(t)) return false;
      // dx must come back in dy's order (Note [Channels-last activations]).
      if (conv_bf16_returns_channels_last(t, gy) != stored_channels_last(gy)) return false;
    }
  }
  return true;
}

Tensor conv2d_bf16_input_grad_as_forward(const ConvGeometry& g, const Tensor& gy, const Tensor& w) {
  profiler::Scope prof("conv2d_bf16.backward_data_as_forward");
  LS_CHECK(conv_bf16_input_grad_as_forward(g, gy, kBFloat16), "conv2d_bf16_input_grad_as_forward: "
           "this layer's input gradient is not made of forward convolutions (check "
           "conv_bf16_input_grad_as_forward first)");
  const auto phase = [&](int64_t ry, int64_t rx) {
    const Phase py = phase_of(ry, g.stride_h, g.kh, g.pad_h, g.h);
    const Phase px = phase_of(rx, g.stride_w, g.kw, g.pad_w, g.w);
    Tensor wp;
    {
      profiler::Scope p1("conv2d_bf16.backward_data_weight");
      wp = phase_weight(w, g, py, px);
    }
    return conv2d_bf16_forward(phase_geometry(g, py, px), gy, wp, Tensor());
  };
  if (g.stride_h == 1 && g.stride_w == 1) return phase(0, 0);  // one phase: dx itself
  // (N, C_in, H, W) in dy's order; each phase fills the rows y = sH m + ry, columns x = sW m + rx.
  Tensor gx = stored_channels_last(gy) ? empty_channels_last({g.n, g.c_in, g.h, g.w}, kBFloat16)
                                       : empty({g.n, g.c_in, g.h, g.w}, kBFloat16);
  for (int64_t ry = 0; ry < g.stride_h; ++ry) {
    for (int64_t rx = 0; rx < g.stride_w; ++rx) {
      const Tensor part = phase(ry, rx);  // (N, C_in, My, Mx)
      profiler::Scope p2("conv2d_bf16.backward_data_interleave");
      const IntList& st = gx.strides();
      copy_(as_strided(gx, part.sizes(), {st[0], st[1], st[2] * g.stride_h, st[3] * g.stride_w},
                       ry * st[2] + rx * st[3]),
            part);
    }
  }
  return gx;
}

}  // namespace lockstep::native
