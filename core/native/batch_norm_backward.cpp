// core/native/batch_norm_backward.cpp — batch normalisation's backward, plain
// and with the fused ReLU's mask (from the output, or recomputed from the input:
// Note [ReLU mask from the input] in core/native/batch_norm.cpp), and the fused
// add + ReLU's. The formulas are in batch_norm.cpp's header; per channel,
// with g = dL/dy (masked) and xhat = (x - mean) * invstd,
//   training:  dx = w * invstd * (g - sum(g) / M - xhat * sum(g * xhat) / M)
// is computed as dx = a * g + bx * x + c0 once the two sums of a first pass
// (grad_sums, core/native/batch_norm_sums.h) are known: two reads of x and g.
// A bfloat16 input takes core/native/batch_norm_bf16.cpp instead.
//
// Read before: core/native/batch_norm.cpp. Read next: autograd/functions/batch_norm.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/native/batch_norm_bf16.h"
#include "core/native/batch_norm_rules.h"
#include "core/native/batch_norm_sums.h"
#include "core/native/cuda_dispatch.h"
#include "core/native/fused_relu.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/native/fast/streaming_store.h"
#include "core/parallel.h"
#include "core/shape.h"

namespace lockstep::native {

namespace {

using namespace batch_norm_detail;  // core/native/batch_norm_sums.h

// The fused ReLU's mask for backward_impl: none, the forward's output (whose
// zeros mask grad_output), or the input with the forward's bias (Note [ReLU
// mask from the input]; the bias may be undefined, i.e. 0).
struct ReluMask {
  Mask kind = Mask::None;
  Tensor output;  // Mask::Output
  Tensor bias;    // Mask::Input
};

std::tuple<Tensor, Tensor, Tensor> backward_impl(const Tensor& grad_output, const Tensor& input,
                                                 const Tensor& weight, const Tensor& save_mean,
                                                 const Tensor& save_invstd, const ReluMask& mask,
                                                 bool training, bool need_input, bool need_weight,
                                                 bool need_bias, const Tensor& masked_grad,
                                                 const char* op) {
  const auto [c, s] = rules::check_batch_norm_backward(grad_output, input, weight, save_mean,
                                                       save_invstd, mask.output, op, [] {});
  if (mask.kind == Mask::Input) rules::check_channel_vector(mask.bias, "bias", c, input.dtype(), op);
  const bool relu = mask.kind == Mask::Output;
  const int64_t n = input.size(0), m = n * s;
  const Tensor gy = contiguous(grad_output), x = contiguous(input);
  const Tensor w = weight.defined() ? contiguous(weight) : Tensor();
  const Tensor mean_t = contiguous(save_mean), invstd_t = contiguous(save_invstd);
  const Tensor out = relu ? contiguous(mask.output) : Tensor();
  const Tensor bias = mask.bias.defined() ? contiguous(mask.bias) : Tensor();
  Tensor grad_input = need_input ? empty(x.sizes(), x.dtype()) : Tensor();
  Tensor grad_weight = need_weight ? empty({c}, x.dtype()) : Tensor();
  Tensor grad_bias = need_bias ? empty({c}, x.dtype()) : Tensor();
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    const T* gyp = gy.data_ptr<T>();
    const T* xp = x.data_ptr<T>();
    const T* wp = w.defined() ? w.data_ptr<T>() : nullptr;
    const T* mean_p = mean_t.data_ptr<T>();
    const T* invstd_p = invstd_t.data_ptr<T>();
    const T* outp = relu ? out.data_ptr<T>() : nullptr;
    const T* bp = bias.defined() ? bias.data_ptr<T>() : nullptr;
    T* gxp = need_input ? grad_input.data_ptr<T>() : nullptr;
    T* gwp = need_weight ? grad_weight.data_ptr<T>() : nullptr;
    T* gbp = need_bias ? grad_bias.data_ptr<T>() : nullptr;
    // With masked_grad (batch_norm_add_relu), pass 1 stores gm there. Small
    // tensors: pass 2 reads it back (still in cache: one channel at a time)
    // instead of masking. Large ones (streaming): pass 1 streams gm out, which
    // spares the read a normal store makes first (Note [Streaming stores]), and
    // pass 2 masks g again from g and the output, both still in cache.
    T* gmp = masked_grad.defined() ? masked_grad.data_ptr<T>() : nullptr;
    const bool streaming = need_input && detail::use_streaming_stores<T>(x.numel());
    const bool stream_gm = gmp != nullptr && streaming;
    parallel_for(0, c, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t ch = lo; ch < hi; ++ch) {
        const double mean = mean_p[ch], invstd = invstd_p[ch];
        const T t_mean = static_cast<T>(mean);
        // The forward's coefficients, for Mask::Input (Note [ReLU mask from the input]).
        const Affine<T> affine = affine_coefficients<T>(mean_p[ch], invstd_p[ch], wp, bp, ch);
        double sum_g = 0, sum_g_xmu = 0;  // sum g, sum g * (x - mean)
        for (int64_t i = 0; i < n; ++i) {
          const T* g = gyp + (i * c + ch) * s;
          const T* src = xp + (i * c + ch) * s;
          if (relu) {  // g masked where the fused ReLU output is 0
            grad_sums<T, Mask::Output>(g, src, outp + (i * c + ch) * s, s, t_mean, affine, sum_g,
                                       sum_g_xmu, gmp != nullptr ? gmp + (i * c + ch) * s : nullptr,
                                       stream_gm);
          } else if (mask.kind == Mask::Input) {  // ... where fma(x, scale, shift) <= 0
            grad_sums<T, Mask::Input>(g, src, nullptr, s, t_mean, affine, sum_g, sum_g_xmu);
          } else {
            grad_sums<T, Mask::None>(g, src, nullptr, s, t_mean, affine, sum_g, sum_g_xmu);
          }
        }
        const double sum_g_xhat = sum_g_xmu * invstd;
        if (gbp != nullptr) gbp[ch] = static_cast<T>(sum_g);
        if (gwp != nullptr) gwp[ch] = static_cast<T>(sum_g_xhat);
        if (gxp == nullptr) continue;
        const auto [a, bx, c0] = grad_input_coefficients<T>(
            wp != nullptr ? static_cast<double>(wp[ch]) : 1.0, mean, invstd, sum_g, sum_g_xhat, m,
            training);
        const bool reread_gm = gmp != nullptr && !stream_gm;
        const bool output_mask = relu && !reread_gm;  // else gm is read back
        const bool input_mask = mask.kind == Mask::Input;
        for (int64_t i = 0; i < n; ++i) {
          const T* g = (reread_gm ? gmp : gyp) + (i * c + ch) * s;
          const T* src = xp + (i * c + ch) * s;
          T* dst = gxp + (i * c + ch) * s;
          if constexpr (std::is_same_v<T, float>) {
            if (streaming && input_mask) {  // Note [Streaming stores]
              detail::stream_grad_run_input_mask(g, src, dst, s, a, bx, c0, affine.scale,
                                                 affine.shift);
              continue;
            }
            if (streaming) {
              detail::stream_grad_run(g, src, output_mask ? outp + (i * c + ch) * s : nullptr,
                                      dst, s, a, bx, c0);
              continue;
            }
          }
          if (output_mask) {
            const T* y = outp + (i * c + ch) * s;
#pragma omp simd
            for (int64_t j = 0; j < s; ++j) {
              dst[j] = a * (y[j] > T(0) ? g[j] : T(0)) + bx * src[j] + c0;
            }
          } else if (input_mask) {
#pragma omp simd
            for (int64_t j = 0; j < s; ++j) {
              const bool live = relu_live<Mask::Input>(src, static_cast<const T*>(nullptr), j, affine);
              dst[j] = a * (live ? g[j] : T(0)) + bx * src[j] + c0;
            }
          } else {
#pragma omp simd
            for (int64_t j = 0; j < s; ++j) dst[j] = a * g[j] + bx * src[j] + c0;
          }
        }
      }
      if (streaming) detail::stream_fence();
    });
  });
  return {grad_input, grad_weight, grad_bias};
}


}  // namespace

std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& save_mean,
    const Tensor& save_invstd, bool training, bool need_input, bool need_weight, bool need_bias) {
  LS_DISPATCH_CUDA(input, batch_norm_backward(grad_output, input, weight, save_mean, save_invstd,
                                              training, need_input, need_weight, need_bias));
  const char* op = "batch_norm_backward";
  if (const auto impl = choose_batch_norm(input, op); impl != BatchNormImpl::Planes) {
    return batch_norm_bf16_backward(grad_output, input, weight, Tensor(), save_mean, save_invstd,
                                    Tensor(), Mask::None, training, need_input, need_weight,
                                    need_bias, nullptr, op, impl);
  }
  return backward_impl(grad_output, input, weight, save_mean, save_invstd, ReluMask{}, training,
                       need_input, need_weight, need_bias, Tensor(), "batch_norm_backward");
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_relu_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& save_mean,
    const Tensor& save_invstd, const Tensor& output, bool training, bool need_input,
    bool need_weight, bool need_bias) {
  LS_DISPATCH_CUDA(
      input, batch_norm_relu_backward(grad_output, input, weight, save_mean, save_invstd, output,
                                      training, need_input, need_weight, need_bias));
  lockstep::detail::check_defined(output, "batch_norm_relu_backward");
  const char* op = "batch_norm_relu_backward";
  if (const auto impl = choose_batch_norm(input, op); impl != BatchNormImpl::Planes) {
    return batch_norm_bf16_backward(grad_output, input, weight, Tensor(), save_mean, save_invstd,
                                    output, Mask::Output, training, need_input, need_weight,
                                    need_bias, nullptr, op, impl);
  }
  return backward_impl(grad_output, input, weight, save_mean, save_invstd,
                       ReluMask{Mask::Output, output, Tensor()}, training, need_input, need_weight,
                       need_bias, Tensor(), "batch_norm_relu_backward");
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_relu_backward_from_input(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& bias,
    const Tensor& save_mean, const Tensor& save_invstd, bool training, bool need_input,
    bool need_weight, bool need_bias) {
  const char* op = "batch_norm_relu_backward_from_input";
  lockstep::detail::check_defined(input, op);
  LS_CHECK(!input.device().is_cuda(), op, ": the input is on ", input.device().str(),
           ", but this backward runs on the CPU only; on a GPU use batch_norm_relu_backward with "
           "the forward's output");
  if (const auto impl = choose_batch_norm(input, op); impl != BatchNormImpl::Planes) {
    return batch_norm_bf16_backward(grad_output, input, weight, bias, save_mean, save_invstd,
                                    Tensor(), Mask::Input, training, need_input, need_weight,
                                    need_bias, nullptr, op, impl);
  }
  return backward_impl(grad_output, input, weight, save_mean, save_invstd,
                       ReluMask{Mask::Input, Tensor(), bias}, training, need_input, need_weight,
                       need_bias, Tensor(), op);
}

std::tuple<Tensor, Tensor, Tensor, Tensor> batch_norm_add_relu_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& save_mean,
    const Tensor& save_invstd, const Tensor& output, bool training, bool need_input,
    bool need_weight, bool need_bias) {
  const char* op = "batch_norm_add_relu_backward";
  lockstep::detail::check_defined(grad_output, op);
  lockstep::detail::check_defined(output, op);
  const BatchNormImpl impl = input.defined() && !input.device().is_cuda()
                                 ? choose_batch_norm(input, op) : BatchNormImpl::Planes;
  if (impl != BatchNormImpl::Planes) {
    Tensor g;  // (N, C, *) bf16: gm, the residual's
    auto [gi, gw, gb] = batch_norm_bf16_backward(grad_output, input, weight, Tensor(), save_mean,
                                                 save_invstd, output, Mask::Output, training,
                                                 need_input, need_weight, need_bias, &g, op, impl);
    return {gi, gw, gb, g};
  }
  const bool fused = !grad_output.device().is_cuda() && !output.device().is_cuda() &&
                     (need_input || need_weight || need_bias);
  if (!fused) {  // the two backwards in turn
    Tensor g = add_relu_backward(grad_output, output);  // (N, C, *)
    if (!need_input && !need_weight && !need_bias) return {Tensor(), Tensor(), Tensor(), g};
    auto [gi, gw, gb] = batch_norm_backward(g, input, weight, save_mean, save_invstd, training,
                                            need_input, need_weight, need_bias);
    return {gi, gw, gb, g};
  }
  Tensor g = empty(grad_output.sizes(), grad_output.dtype());  // (N, C, *): gm, the residual's
  auto [gi, gw, gb] = backward_impl(grad_output, input, weight, save_mean, save_invstd,
                                    ReluMask{Mask::Output, output, Tensor()}, training, need_input,
                                    need_weight, need_bias, g, op);
  return {gi, gw, gb, g};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> batch_norm_add_relu_backward_bits(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& save_mean,
    const Tensor& save_invstd, const Tensor& relu_bits, bool training, bool need_input,
    bool need_weight, bool need_bias) {
  const char* op = "batch_norm_add_relu_backward_bits";
  lockstep::detail::check_defined(input, op);
  const BatchNormImpl impl =
      !input.device().is_cuda() ? choose_batch_norm(input, op) : BatchNormImpl::Planes;
  LS_CHECK(impl == BatchNormImpl::Bf16ChannelsLast, op,
           ": the ReLU's bit mask comes from a channels-last bfloat16 CPU forward, but the input "
           "is ", input.dtype(), " ", input.shape_str(), " on ", input.device().str(),
           "; use batch_norm_add_relu_backward with the forward's output");
  Tensor g;  // (N, C, H, W) bf16 channels-last: gm, the residual's
  auto [gi, gw, gb] = batch_norm_bf16_backward(grad_output, input, weight, Tensor(), save_mean,
                                               save_invstd, relu_bits, Mask::Bits, training,
                                               need_input, need_weight, need_bias, &g, op, impl);
  return {gi, gw, gb, g};
}

}  // namespace lockstep::native
