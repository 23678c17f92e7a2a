// core/native/fast/conv_bf16_input_grad.cpp — the input gradient of a stride-1 bf16
// convolution as a forward convolution.
//
// Note [bf16 input gradient as a forward convolution]
// For stride 1 (dilation 1, one group) the input gradient is itself a
// convolution, of the output gradient with the kernel transposed and flipped:
//   dx[n, c, y, x] = sum_(o, i, j) dy[n, o, y + pH - i, x + pW - j] w[o, c, i, j]
//                  = conv(dy, w')[n, c, y, x],  w'[c, o, i, j] = w[o, c, kH-1-i, kW-1-j],
// with padding kH - 1 - pH, kW - 1 - pW (the output is H x W again). oneDNN 2.6
// runs its forward pass on AMX as brgconv but the backward-data pass as the older
// jit:avx512_core_amx_bf16 kernel, up to twice as slow for the same products:
// ResNet50 batch 8, one thread (ONEDNN_VERBOSE, per call): 3x3 512 at 7x7 19.2 ms
// backward-data against 9.7 forward; at 14x14 (256) 6.8 against 6.5, at 56x56
// (64) 5.8 against 4.6. So the stride-1 layers that go to oneDNN take their dx
// from conv2d_bf16_forward on dy and w' (w' made per call from the bf16 weight:
// each (o, c) block of taps copied reversed into block (c, o)).
// Same products, another order of the sums: compared with the float32 reference
// at the tolerance of the other bf16 passes (tests/core/test_channels_last.cpp).
// dx comes back in dy's order, as from every bf16 pass. Strided layers keep the
// backward-data primitive (their gradient is a transposed convolution: four
// phase kernels, not one forward). LOCKSTEP_BF16_DGRAD_FORWARD=0 keeps every
// layer on the primitive (A/B runs).
//
// Read before: core/native/conv_bf16.h. Read next: core/native/fast/conv_bf16_weight_grad.cpp.
#include <cstdint>

#include "core/env_flag.h"
#include "core/native/conv_bf16.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/profiler.h"

namespace lockstep::native {

namespace {

// The forward convolution whose output is g's input gradient.
ConvGeometry input_grad_geometry(const ConvGeometry& g) {
  ConvGeometry t = g;
  t.c_in = g.c_out;
  t.c_out = g.c_in;
  t.h = g.oh;
  t.w = g.ow;
  t.oh = g.h;
  t.ow = g.w;
  t.pad_h = g.kh - 1 - g.pad_h;
  t.pad_w = g.kw - 1 - g.pad_w;
  return t;
}

// w (C_out, C_in, kH, kW) bf16 -> w' (C_in, C_out, kH, kW), w'[c, o, i, j] = w[o, c, kH-1-i, kW-1-j].
Tensor transposed_flipped(const Tensor& w) {
  const Tensor wc = contiguous(w);
  const int64_t c_out = wc.size(0), c_in = wc.size(1), taps = wc.size(2) * wc.size(3);
  Tensor out = empty({c_in, c_out, wc.size(2), wc.size(3)}, kBFloat16);
  const BFloat16* src = wc.data_ptr<BFloat16>();
  BFloat16* dst = out.data_ptr<BFloat16>();
  parallel_for(0, c_in, 8, [src, dst, c_in, c_out, taps](int64_t lo, int64_t hi) {
    const auto blocks = [&]<int64_t kTaps>(int64_t n) {  // kTaps > 0: the count known here
      for (int64_t c = lo; c < hi; ++c) {
        for (int64_t o = 0; o < c_out; ++o) {
          const uint16_t* from = &src[(o * c_in + c) * n].bits;
          uint16_t* to = &dst[(c * c_out + o) * n].bits;
          if constexpr (kTaps > 0) {
#pragma GCC unroll 9
            for (int64_t t = 0; t < kTaps; ++t) to[t] = from[kTaps - 1 - t];
          } else {
            for (int64_t t = 0; t < n; ++t) to[t] = from[n - 1 - t];
          }
        }
      }
    };
    if (taps == 9) {
      blocks.template operator()<9>(9);  // 3x3, the common kernel
    } else {
      blocks.template operator()<0>(taps);
    }
  });
  return out;
}

}  // namespace

bool conv_bf16_input_grad_as_forward(const ConvGeometry& g, const Tensor& gy, ScalarType gx_dtype) {
  static const bool enabled = env_flag("LOCKSTEP_BF16_DGRAD_FORWARD", true);
  if (!enabled || gx_dtype != kBFloat16 || g.groups != 1 || g.stride_h != 1 || g.stride_w != 1 ||
      g.dil_h != 1 || g.dil_w != 1 || g.pad_h >= g.kh || g.pad_w >= g.kw || !gy.device().is_cpu() ||
      conv_bf16_is_pointwise_gemm(g) || conv_bf16_is_direct(g)) {
    return false;
  }
  const ConvGeometry t = input_grad_geometry(g);
  // The oneDNN forward, returning dx in dy's order (Note [Channels-last activations]).
  return !conv_bf16_is_pointwise_gemm(t) && !conv_bf16_is_direct(t) &&
         conv_bf16_returns_channels_last(t, gy) == stored_channels_last(gy);
}

Tensor conv2d_bf16_input_grad_as_forward(const ConvGeometry& g, const Tensor& gy, const Tensor& w) {
  profiler::Scope prof("conv2d_bf16.backward_data_as_forward");
  LS_CHECK(conv_bf16_input_grad_as_forward(g, gy, kBFloat16), "conv2d_bf16_input_grad_as_forward: "
           "this layer's input gradient is not a stride-1 forward convolution (check "
           "conv_bf16_input_grad_as_forward first)");
  return conv2d_bf16_forward(input_grad_geometry(g), gy, transposed_flipped(w), Tensor());
}

}  // namespace lockstep::native
