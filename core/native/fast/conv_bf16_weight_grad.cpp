// core/native/fast/conv_bf16_weight_grad.cpp — the weight gradient of bf16 convolutions on small images, as one GEMM.
//
// § Note [bf16 backward-weights as one GEMM]
// oneDNN 2.6's AMX backward-weights kernel for bf16 (jit:avx512_core_amx_bf16)
// runs far below the AMX GEMM when the output image is small or the input has
// few channels: on ResNet50's 14x14 and 7x7 stages and its 7x7 stem, several
// times slower than this file's GEMM alone, while at 28x28 and 56x56 the
// primitive runs at the GEMM's rate and keeps those layers. The im2col below
// costs a pass over the columns on top (the stem's are 29 MB), and the whole
// step is still faster with this rule than without (the measurements, and the
// A/B switch LOCKSTEP_BF16_WGRAD_GEMM=0: docs/results/kernel_choices.md). For
// those layers the gradient is computed as the matrix product it is, over the
// whole batch at once:
//   dW (C_out, C_in kH kW) = dY' (C_out, N P) cols^T (N P, C_in kH kW)
// with P = oH oW, dY' the gradient channel-major (conv_bf16_channels_major) and
// cols the batch's im2col: row (c, i, j) holds, for every image n and output
// pixel p, the input value that p's window reads at kernel offset (i, j) of
// channel c (0 in the padding). One AMX GEMM with K = N P, float32 output: the
// same sum of the same products as the primitive's, in another order.
// Used, with groups == 1, for small images of many channels (P <= 14 x 14 and
// C_in >= kManyChannels) and for large kernels over few channels (C_in <
// kFewChannels, kH kW > 9, as the stem). The primitive keeps the rest, which
// it runs faster than the im2col and the GEMM together (on the Fashion-MNIST
// SmallCNN's layers the im2col alone, over rows of 14, costs more than the whole
// primitive). Without AMX (oneDNN's jit_bf16:avx512_core_bf16 kernels, e.g. AMD
// Zen 4) the primitive keeps every layer but the strided ones with small outputs:
// on the others it is about as fast as the GEMM or faster, and the whole step's
// backward-weights was slower under the AMX rule above (docs/results/kernel_choices.md).
// LOCKSTEP_BF16_WGRAD_GEMM=0 sends every layer to the primitive (benchmarks).
//
// On channels-last operands (Note [Channels-last activations] in memory_format.h)
// the same product is taken the other way round: dY is already the (N P, C_out)
// matrix, and the columns are (N P, kH kW C_in), each row the kH kW windows of one
// output pixel, each window C_in contiguous input values (one memcpy, or zeros in
// the padding), so
//   dW' (C_out, kH kW C_in) = dY^T (C_out, N P) cols (N P, kH kW C_in),
// one GEMM on dY^T copied channel-major (a register transpose: oneDNN's matmul
// ran the transposed-A form slower here), and dW is dW' with its
// (kH kW, C_in) blocks transposed into (C_in, kH kW) (a tiled copy).
//
// Read before: core/native/conv_bf16.h, core/native/fast/conv_bf16_pointwise.cpp.
// Read next: core/native/gemm_bf16.h.
#include <algorithm>
#include <cstring>

#include "core/env_flag.h"
#include "core/native/conv_bf16.h"
#include "core/native/fast/onednn_engine.h"
#include "core/native/gemm_bf16.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/profiler.h"

namespace lockstep::native {

namespace {

constexpr int64_t kSmallImagePixels = 196;  // 14 x 14
constexpr int64_t kTinyImagePixels = 49;    // 7 x 7
constexpr int64_t kManyChannels = 64;
constexpr int64_t kFewChannels = 16;
constexpr int64_t kSmallKernel = 9;  // 3 x 3

// The batch's im2col (C_in kH kW, N P) of a contiguous bf16 x (N, C_in, H, W).
// Each output row of the window at kernel offset (i, j) reads input row iy at
// columns ix = ox * stride - pad + j * dil: zero outside [ox_lo, ox_hi), a
// copy (stride 1) or a strided gather inside.
Tensor batch_columns(const ConvGeometry& g, const BFloat16* x) {
  const int64_t p = g.oh * g.ow, np = g.n * p, rows = g.c_in * g.kh * g.kw;
  Tensor cols = empty({rows, np}, kBFloat16);
  uint16_t* cp = reinterpret_cast<uint16_t*>(cols.data_ptr<BFloat16>());
  const uint16_t* xp = reinterpret_cast<const uint16_t*>(x);
  parallel_for(0, rows, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t c = r / (g.kh * g.kw), i = (r / g.kw) % g.kh, j = r % g.kw;
      const int64_t shift = j * g.dil_w - g.pad_w;  // ix = ox * stride + shift
      // The ox whose ix lies in [0, W): ceil(-shift / stride) <= ox <= (W - 1 - shift) / stride.
      const int64_t ox_lo = std::clamp<int64_t>(shift >= 0 ? 0 : (-shift + g.stride_w - 1) / g.stride_w, 0, g.ow);
      const int64_t ox_hi = std::clamp<int64_t>(
          g.w - 1 - shift < 0 ? 0 : (g.w - 1 - shift) / g.stride_w + 1, ox_lo, g.ow);
      for (int64_t n = 0; n < g.n; ++n) {
        const uint16_t* plane = xp + (n * g.c_in + c) * g.h * g.w;
        uint16_t* out = cp + r * np + n * p;
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          uint16_t* row = out + oy * g.ow;
          const int64_t iy = oy * g.stride_h - g.pad_h + i * g.dil_h;
          if (iy < 0 || iy >= g.h) {
            std::memset(row, 0, g.ow * sizeof(uint16_t));
            continue;
          }
          std::memset(row, 0, ox_lo * sizeof(uint16_t));
          std::memset(row + ox_hi, 0, (g.ow - ox_hi) * sizeof(uint16_t));
          const int64_t base = iy * g.w + shift;  // + ox * stride: in [0, W) for ox in range
          if (g.stride_w == 1) {
            std::memcpy(row + ox_lo, plane + base + ox_lo, (ox_hi - ox_lo) * sizeof(uint16_t));
          } else {
            for (int64_t ox = ox_lo; ox < ox_hi; ++ox) row[ox] = plane[base + ox * g.stride_w];
          }
        }
      }
    }
  });
  return cols;
}

// The batch's columns (N P, kH kW C_in) of a channels-last bf16 x: row (n, oy, ox)
// holds, window by window, the C_in values its kernel offset (i, j) reads.
Tensor pixel_columns(const ConvGeometry& g, const BFloat16* x) {
  const int64_t kc = g.kh * g.kw * g.c_in, c = g.c_in;
  Tensor cols = empty({g.n * g.oh * g.ow, kc}, kBFloat16);
  BFloat16* cp = cols.data_ptr<BFloat16>();
  parallel_for(0, g.n * g.oh, 1, [cp, x, &g, kc, c](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {  // r = n * oH + oy: one row of output pixels
      const int64_t n = r / g.oh, oy = r % g.oh;
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        BFloat16* row = cp + (r * g.ow + ox) * kc;
        for (int64_t i = 0; i < g.kh; ++i) {
          const int64_t iy = oy * g.stride_h - g.pad_h + i * g.dil_h;
          for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t ix = ox * g.stride_w - g.pad_w + j * g.dil_w;
            BFloat16* dst = row + (i * g.kw + j) * c;
            if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) {
              std::memset(static_cast<void*>(dst), 0, c * sizeof(BFloat16));
            } else {
              std::memcpy(static_cast<void*>(dst), x + ((n * g.h + iy) * g.w + ix) * c,
                          c * sizeof(BFloat16));
            }
          }
        }
      }
    }
  });
  return cols;
}

// The channels-last form of conv2d_bf16_weight_grad_gemm (the note above).
Tensor weight_grad_channels_last(const ConvGeometry& g, const Tensor& gy, const Tensor& x,
                                 Tensor* grad_bias) {
  const int64_t np = g.n * g.oh * g.ow, kc = g.kh * g.kw * g.c_in;
  // The (N, H, W, C) buffers behind the channels-last views, as matrices.
  const Tensor dy = channels_last_rows(gy);  // (N P, C_out), a view
  Tensor cols;
  {
    profiler::Scope p2("conv2d_bf16.wgrad_im2col");
    cols = pixel_columns(g, channels_last_rows(x).data_ptr<BFloat16>());  // (N P, kH kW C_in)
  }
  Tensor dy_t;
  {
    profiler::Scope p1("conv2d_bf16.wgrad_channels_major");
    dy_t = contiguous(transpose(dy, 0, 1));  // (C_out, N P): a register transpose
  }
  profiler::Scope p3("conv2d_bf16.wgrad_gemm");
  Tensor gw_t = empty({g.c_out, g.kh * g.kw, g.c_in}, kFloat32);  // dW' (C_out, kH kW, C_in)
  gemm_bf16<float>(false, false, g.c_out, kc, np, dy_t.data_ptr<BFloat16>(), np,
                   cols.data_ptr<BFloat16>(), kc, 0.0f, gw_t.data_ptr<float>(), kc);
  Tensor gw = empty({g.c_out, g.c_in, g.kh * g.kw}, kFloat32);
  copy_(gw, transpose(gw_t, 1, 2));  // (C_out, C_in, kH kW)
  if (grad_bias != nullptr) *grad_bias = sum_rows_to_float(dy);  // (C_out)
  return reshape(gw, {g.c_out, g.c_in, g.kh, g.kw});
}

}  // namespace

bool conv_bf16_weight_grad_as_gemm(const ConvGeometry& g) {
  static const bool enabled = env_flag("LOCKSTEP_BF16_WGRAD_GEMM", true);
  const bool amx = onednn_detail::has_amx();
  const bool many_channels = g.c_in >= kManyChannels;
  if (!amx) {
    const bool strided = g.stride_h > 1 || g.stride_w > 1;
    return enabled && g.groups == 1 && many_channels && strided && g.oh * g.ow <= kTinyImagePixels;
  }
  const bool small_image = g.oh * g.ow <= kSmallImagePixels && many_channels;
  const bool large_kernel_few_channels = g.c_in < kFewChannels && g.kh * g.kw > kSmallKernel;
  return enabled && g.groups == 1 && (small_image || large_kernel_few_channels);
}

Tensor conv2d_bf16_weight_grad_gemm(const ConvGeometry& g, const Tensor& gy, const Tensor& x,
                                    Tensor* grad_bias) {
  profiler::Scope prof("conv2d_bf16.backward_weights_im2col_gemm");
  LS_CHECK(gy.dtype() == kBFloat16 && x.dtype() == kBFloat16,
           "conv2d_bf16_weight_grad_gemm: gy and x must be bfloat16 tensors");
  if (is_channels_last(gy) && is_channels_last(x)) return weight_grad_channels_last(g, gy, x, grad_bias);
  LS_CHECK(gy.is_contiguous() && x.is_contiguous(), "conv2d_bf16_weight_grad_gemm: gy and x must "
           "be both contiguous or both channels-last");
  const int64_t np = g.n * g.oh * g.ow, rows = g.c_in * g.kh * g.kw;
  Tensor dy, cols;
  {
    profiler::Scope p1("conv2d_bf16.wgrad_channels_major");
    dy = conv_bf16_channels_major(gy.data_ptr<BFloat16>(), g.n, g.c_out, g.oh * g.ow);
  }
  {
    profiler::Scope p2("conv2d_bf16.wgrad_im2col");
    cols = batch_columns(g, x.data_ptr<BFloat16>());  // (C_in kH kW, N P)
  }
  profiler::Scope p3("conv2d_bf16.wgrad_gemm");
  Tensor gw = empty({g.c_out, g.c_in, g.kh, g.kw}, kFloat32);     // (C_out, C_in kH kW)
  gemm_bf16<float>(false, /*trans_b=*/true, g.c_out, rows, np, dy.data_ptr<BFloat16>(), np,
                   cols.data_ptr<BFloat16>(), np, 0.0f, gw.data_ptr<float>(), rows);
  if (grad_bias != nullptr) *grad_bias = sum(to_dtype(dy, kFloat32), {1}, false);  // (C_out)
  return gw;
}

}  // namespace lockstep::native
