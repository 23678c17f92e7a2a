// core/native/batch_norm.cpp — batch normalisation, forward and backward.
//
// The input (N, C, *) is read as (N, C, S), S = the product of the trailing dims
// (1 for (N, C)), so channel c owns the N runs x[n, c, 0:S] and its statistics
// are over M = N * S values. Channels are independent and run in parallel.
// Sums are vectorised: each run of S values is summed in T across SIMD lanes
// in blocks of kSumBlock values (run_shifted_sums, grad_sums in
// core/native/batch_norm_sums.h), and the
// block sums are added in double — the same split as a pairwise sum, so the
// error stays a few ulps of T however long the run (S is 10^6 for a 1000x1000
// image; summing such a run in float, unvectorised, was off by 1e-3).
//
// Forward, per channel, with mean and invstd = 1 / sqrt(var + eps):
//   y = (x - mean) * invstd * w + b  =  x * scale + shift,
//   scale = w * invstd,  shift = b - mean * scale.
// Training uses the batch mean and biased variance sum((x - mean)^2) / M, both
// from one pass over x (Note [One-pass batch statistics]), and moves the
// running statistics toward them:
//   running_mean = (1 - momentum) * running_mean + momentum * mean
//   running_var  = (1 - momentum) * running_var  + momentum * var * M / (M - 1)
// (the unbiased variance, as PyTorch). Eval uses the running statistics.
//
// Backward, per channel, with g = dL/dy and xhat = (x - mean) * invstd:
//   db = sum g        dw = sum g * xhat
//   eval:      dx = w * invstd * g
//   training:  dx = w * invstd * (g - sum(g) / M - xhat * sum(g * xhat) / M),
// the extra terms being the gradient that flows through mean and var, which
// depend on every x of the channel. The backward kernels are in
// core/native/batch_norm_backward.cpp.
//
// A bfloat16 input (autocast's convolutions return one) takes the kernels of
// core/native/batch_norm_bf16.cpp: bf16 activations, float32 statistics and
// arithmetic (Note [bfloat16 batch norm]).
//
// Outputs of 12 MiB and more (float32) are written with streaming stores: see
// Note [Streaming stores] in core/native/fast/streaming_store.h.
//
// Fused ReLU (batch_norm_relu_*, core/native/fused_relu.h): the forward
// writes max(y, 0) in the same pass, and the backward uses g * (out > 0) for g
// in every formula above, on the fly (see Note [Fused BatchNorm + ReLU] in
// autograd/functions/batch_norm.cpp), with the mask read from the saved output
// or recomputed from the input (Note [ReLU mask from the input]).
//
// § Note [ReLU mask from the input]
// batch_norm_relu's backward needs out > 0, and out > 0 iff x * scale + shift
// > 0: the mask can be recomputed from x, which the backward reads anyway, so
// the output need not be read at all (one activation-sized read fewer, a
// quarter of the kernel's memory traffic: ResNet50 runs 33 of them a step).
// That is exact only if the backward rounds as the forward did, so both take
// their per-channel coefficients from affine_coefficients (batch_norm_sums.h), which
// starts from the saved float mean and invstd rather than the forward's double
// ones, and every forward path computes x * scale + shift as one fused
// multiply-add (std::fma, _mm512_fmadd_ps: exactly rounded, so the scalar and
// vector loops agree to the bit), as does the backward's mask. The backward
// with this mask is batch_norm_relu_backward_from_input; it also needs the
// bias, for shift. batch_norm_add_relu cannot do the same (its mask depends on
// the residual too) and reads its output.
//
// § Note [One-pass batch statistics]
// mean and var come from one read of the channel: with a shift K (the
// channel's first value), d = x - K, mean = K + sum(d) / M and
// var = sum(d^2) / M - (sum(d) / M)^2. Summing d rather than x keeps the
// subtraction benign: the textbook sum(x^2) / M - mean^2 cancels
// catastrophically when |mean| >> std, while K lies inside the data, so
// |mean - K| is a few std at most. Each run of S values is summed in T across
// SIMD lanes (both sums in the same loop), the runs in double; var is clamped
// at 0 against rounding. The old two-pass form read x three times per
// forward (sum, squared deviations, output); this reads it twice.
//
// Read before: core/native/nn_kernels.h, core/native/fused_relu.h,
// core/native/batch_norm_sums.h. Read next: core/native/batch_norm_backward.cpp.
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

// Element i of a 1-d tensor of any stride (running stats may be views).
template <class T>
T& at(const Tensor& t, int64_t i) {
  return t.data_ptr<T>()[i * t.stride(0)];
}

std::tuple<Tensor, Tensor, Tensor> forward_impl(const Tensor& input, const Tensor& weight,
                                                const Tensor& bias, const Tensor& running_mean,
                                                const Tensor& running_var, bool training,
                                                double momentum, double eps, bool relu,
                                                const Tensor& residual, const char* op) {
  const auto [c, s] = rules::check_batch_norm_forward(input, weight, bias, running_mean, running_var,
                                                      training, op, [] {});
  const Tensor r = residual.defined() ? contiguous(residual) : Tensor();  // relu is set with it
  const int64_t n = input.size(0), m = n * s;  // M values per channel
  const Tensor x = contiguous(input);
  const Tensor w = weight.defined() ? contiguous(weight) : Tensor();
  const Tensor b = bias.defined() ? contiguous(bias) : Tensor();
  Tensor out = empty(x.sizes(), x.dtype());  // (N, C, *)
  Tensor save_mean = empty({c}, x.dtype());  // (C)
  Tensor save_invstd = empty({c}, x.dtype());
  const bool update = training && running_mean.defined();
  const bool update_var = training && running_var.defined();
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    const T* xp = x.data_ptr<T>();
    const T* rp = r.defined() ? r.data_ptr<T>() : nullptr;
    T* yp = out.data_ptr<T>();
    const T* wp = w.defined() ? w.data_ptr<T>() : nullptr;
    const T* bp = b.defined() ? b.data_ptr<T>() : nullptr;
    T* mean_p = save_mean.data_ptr<T>();
    T* invstd_p = save_invstd.data_ptr<T>();
    const bool streaming = detail::use_streaming_stores<T>(x.numel());
    // Each channel writes only its own element of the running stats: no races.
    parallel_for(0, c, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t ch = lo; ch < hi; ++ch) {
        double mean, var;
        if (training) {  // Note [One-pass batch statistics]
          const T shift = xp[ch * s];
          double sum = 0, sum_sq = 0;
          for (int64_t i = 0; i < n; ++i) {
            run_shifted_sums<T>(xp + (i * c + ch) * s, s, shift, sum, sum_sq);
          }
          const double mean_d = sum / static_cast<double>(m);
          mean = static_cast<double>(shift) + mean_d;
          var = std::max(sum_sq / static_cast<double>(m) - mean_d * mean_d, 0.0);
          if (update) {
            T& r = at<T>(running_mean, ch);
            r = static_cast<T>((1 - momentum) * r + momentum * mean);
          }
          if (update_var) {
            T& r = at<T>(running_var, ch);
            r = static_cast<T>((1 - momentum) * r + momentum * var * static_cast<double>(m) /
                                                        static_cast<double>(m - 1));
          }
        } else {
          mean = at<T>(running_mean, ch);
          var = at<T>(running_var, ch);
        }
        mean_p[ch] = static_cast<T>(mean);
        invstd_p[ch] = static_cast<T>(1.0 / std::sqrt(var + eps));
        // From the saved values, as a backward recomputes them (Note [ReLU mask from the input]).
        const Affine<T> affine = affine_coefficients<T>(mean_p[ch], invstd_p[ch], wp, bp, ch);
        const T t_scale = affine.scale, t_shift = affine.shift;
        for (int64_t i = 0; i < n; ++i) {
          const T* src = xp + (i * c + ch) * s;
          T* dst = yp + (i * c + ch) * s;
          const T* res = rp != nullptr ? rp + (i * c + ch) * s : nullptr;
          if constexpr (std::is_same_v<T, float>) {
            if (streaming && res != nullptr) {  // Note [Streaming stores]
              detail::stream_affine_add_relu_run(src, res, dst, s, t_scale, t_shift);
              continue;
            }
            if (streaming) {
              detail::stream_affine_run(src, dst, s, t_scale, t_shift, relu);
              continue;
            }
          }
          if (res != nullptr) {  // batch_norm_add_relu
#pragma omp simd
            for (int64_t j = 0; j < s; ++j) {
              dst[j] = std::max(std::fma(src[j], t_scale, t_shift) + res[j], T(0));
            }
          } else if (relu) {
#pragma omp simd
            for (int64_t j = 0; j < s; ++j) dst[j] = std::max(std::fma(src[j], t_scale, t_shift), T(0));
          } else {
#pragma omp simd
            for (int64_t j = 0; j < s; ++j) dst[j] = std::fma(src[j], t_scale, t_shift);
          }
        }
      }
      if (streaming) detail::stream_fence();
    });
  });
  // The running statistics were written in place (see Note [Saved tensor versions]).
  if (update) running_mean.impl()->storage->bump_version();
  if (update_var) running_var.impl()->storage->bump_version();
  return {out, save_mean, save_invstd};
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> batch_norm_forward(const Tensor& input, const Tensor& weight,
                                                      const Tensor& bias,
                                                      const Tensor& running_mean,
                                                      const Tensor& running_var, bool training,
                                                      double momentum, double eps) {
  LS_DISPATCH_CUDA(input, batch_norm_forward(input, weight, bias, running_mean, running_var,
                                             training, momentum, eps));
  if (const auto impl = choose_batch_norm(input, "batch_norm"); impl != BatchNormImpl::Planes) {
    return batch_norm_bf16_forward(input, Tensor(), weight, bias, running_mean, running_var,
                                   training, momentum, eps, false, "batch_norm", impl);
  }
  return forward_impl(input, weight, bias, running_mean, running_var, training, momentum, eps,
                      false, Tensor(), "batch_norm");
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_relu_forward(
    const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
    const Tensor& running_var, bool training, double momentum, double eps) {
  LS_DISPATCH_CUDA(input, batch_norm_relu_forward(input, weight, bias, running_mean, running_var,
                                                  training, momentum, eps));
  if (const auto impl = choose_batch_norm(input, "batch_norm_relu"); impl != BatchNormImpl::Planes) {
    return batch_norm_bf16_forward(input, Tensor(), weight, bias, running_mean, running_var,
                                   training, momentum, eps, true, "batch_norm_relu", impl);
  }
  return forward_impl(input, weight, bias, running_mean, running_var, training, momentum, eps,
                      true, Tensor(), "batch_norm_relu");
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_add_relu_forward(
    const Tensor& input, const Tensor& residual, const Tensor& weight, const Tensor& bias,
    const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
    double eps, Tensor* relu_bits) {
  const char* op = "batch_norm_add_relu";
  if (relu_bits != nullptr) *relu_bits = Tensor();
  lockstep::detail::check_defined(input, op);
  lockstep::detail::check_defined(residual, op);
  LS_CHECK(residual.sizes() == input.sizes() && residual.dtype() == input.dtype() &&
               residual.device() == input.device(),
           op, ": the residual must have the input's shape, dtype and device, but the input is ",
           input.dtype(), " ", input.shape_str(), " on ", input.device().str(),
           " and the residual ", residual.dtype(), " ", residual.shape_str(), " on ",
           residual.device().str(), "; for broadcasting use add_relu(batch_norm(...), residual)");
  if (input.device().is_cuda()) {  // the two kernels, one after the other
    auto [y, save_mean, save_invstd] = batch_norm_forward(input, weight, bias, running_mean,
                                                          running_var, training, momentum, eps);
    return {add_relu(y, residual), save_mean, save_invstd};
  }
  if (const auto impl = choose_batch_norm(input, op); impl != BatchNormImpl::Planes) {
    return batch_norm_bf16_forward(input, residual, weight, bias, running_mean, running_var,
                                   training, momentum, eps, true, op, impl, relu_bits);
  }
  return forward_impl(input, weight, bias, running_mean, running_var, training, momentum, eps,
                      true, residual, op);
}

}  // namespace lockstep::native
