// core/native/batch_norm_bf16.cpp — batch norm on bfloat16 activations, float32 statistics.
//
// § Note [bfloat16 batch norm]
// Under autocast a ResNet's convolutions return bf16 (Note [Autocast policy] in
// core/autocast.h), and batch norm takes them as they come: its input, the fused
// add's residual, its output and every activation gradient are bf16 — half the
// memory traffic of float32 and half the memory of the activations the step keeps
// for backward — while the weight, bias, running statistics, the saved mean and
// invstd, and the weight and bias gradients stay float32, as PyTorch's mixed-dtype
// batch norm. (Returning float32, as this op first did, made every following
// convolution convert its input back: a cast pass per layer, and float32 copies
// of the activations kept alive.)
// Everything computes in float32: each run x[n, c, :] of a channel is widened into
// float buffers one block of kSumBlock values at a time, the float32 kernel's own
// loops (run_shifted_sums, grad_sums in batch_norm_sums.h, the same affine
// expressions as batch_norm.cpp) run on the buffers, and each result is rounded
// once into bf16. The blocks start where the float32 kernel's summation blocks
// start, so the statistics, the weight and bias gradients and every output equal,
// bit for bit, the float32 kernel run on the widened input and then rounded —
// which is the reference tests/core/test_batch_norm_bf16.cpp checks them against.
// batch_norm_add_relu's residual gradient is g or 0, so storing it in bf16 is exact.
// A channels-last input goes to fast/batch_norm_bf16_nhwc.cpp, which keeps its order
// (Note [bfloat16 batch norm on channels-last activations]).
//
// Read before: core/native/batch_norm.cpp (the formulas), core/native/batch_norm_sums.h.
// Read next: autograd/functions/batch_norm.cpp.
#include "core/native/batch_norm_bf16.h"
#include "core/native/bf16_rows.h"

#include <algorithm>
#include <cmath>

#include "core/native/batch_norm_rules.h"
#include "core/native/dispatch_verbose.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/shape.h"

namespace lockstep::native {

namespace {

using namespace batch_norm_detail;  // core/native/batch_norm_sums.h

constexpr int64_t kBlock = kSumBlock;


// {C, S} of a bf16 (N, C, *) input.
std::pair<int64_t, int64_t> check_input(const Tensor& input, const char* op) {
  lockstep::detail::check_defined(input, op);
  LS_CHECK(input.dim() >= 2, op, ": expected an input (N, C) or (N, C, *) but got shape ",
           input.shape_str());
  LS_CHECK(!input.device().is_cuda(), op, ": the bfloat16 batch norm runs on the CPU, but the "
           "input is on ", input.device().str(), "; convert it with .to(ls::kFloat32)");
  const IntList& s = input.sizes();
  return {s[1], numel_of(IntList(s.begin() + 2, s.end()))};
}

// A per-channel float32 operand of a bf16 batch norm: undefined or (C) float32.
void check_param(const Tensor& t, const char* what, int64_t c, const char* op) {
  if (!t.defined()) return;
  LS_CHECK(t.dim() == 1 && t.size(0) == c, op, ": ", what, " must have shape [", c,
           "] (one value per channel) but got ", t.shape_str());
  LS_CHECK(t.dtype() == kFloat32, op, ": ", what, " is ", t.dtype(),
           ", but a bfloat16 input takes float32 parameters and statistics (mixed precision, "
           "as under autocast); convert it with .to(ls::kFloat32)");
}

// An activation-shaped operand: the input's shape, bfloat16.
void check_like_input(const Tensor& t, const char* what, const Tensor& input, const char* op) {
  lockstep::detail::check_defined(t, op);
  LS_CHECK(t.sizes() == input.sizes() && t.dtype() == kBFloat16, op, ": ", what, " (", t.dtype(),
           " ", t.shape_str(), ") must have the bfloat16 input's shape (", input.shape_str(), ")");
}

// f(base, j, m) for each block [j, j + m) of kBlock values of each run of
// channel ch, the run of image i starting at base = (i * C + ch) * S.
template <class F>
void for_each_block(int64_t n, int64_t c, int64_t s, int64_t ch, F&& f) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t base = (i * c + ch) * s;
    for (int64_t j = 0; j < s; j += kBlock) f(base, j, std::min(kBlock, s - j));
  }
}

float& at(const Tensor& t, int64_t i) { return t.data_ptr<float>()[i * t.stride(0)]; }

}  // namespace

const char* batch_norm_impl_name(BatchNormImpl impl) {
  switch (impl) {
    case BatchNormImpl::Planes: return "planes";
    case BatchNormImpl::Bf16Planes: return "bf16_planes";
    case BatchNormImpl::Bf16ChannelsLast: return "bf16_channels_last";
  }
  return "unknown";
}

BatchNormImpl choose_batch_norm(const Tensor& input, const char* op) {
  if (!input.defined()) return BatchNormImpl::Planes;
  BatchNormImpl impl = BatchNormImpl::Planes;
  if (input.dtype() == kBFloat16) {
    impl = stored_channels_last(input) ? BatchNormImpl::Bf16ChannelsLast : BatchNormImpl::Bf16Planes;
  }
  if (dispatch_verbose()) {
    log_dispatch(op, batch_norm_impl_name(impl), input.dtype(), "input " + input.shape_str());
  }
  return impl;
}

void check_batch_norm_bf16_forward(const Tensor& input, const Tensor& residual, const Tensor& weight,
                                   const Tensor& bias, const Tensor& running_mean,
                                   const Tensor& running_var, bool training, const char* op) {
  const auto [c, s] = check_input(input, op);
  check_param(weight, "weight", c, op);
  check_param(bias, "bias", c, op);
  check_param(running_mean, "running_mean", c, op);
  check_param(running_var, "running_var", c, op);
  if (residual.defined()) check_like_input(residual, "the residual", input, op);
  rules::check_statistics_source(input, s, running_mean, running_var, training, op);
}

void check_batch_norm_bf16_backward(const Tensor& grad_output, const Tensor& input,
                                    const Tensor& weight, const Tensor& save_mean,
                                    const Tensor& save_invstd, const char* op) {
  const int64_t c = check_input(input, op).first;
  check_like_input(grad_output, "grad_output", input, op);
  check_param(weight, "weight", c, op);
  lockstep::detail::check_defined(save_mean, op);
  lockstep::detail::check_defined(save_invstd, op);
  check_param(save_mean, "save_mean", c, op);
  check_param(save_invstd, "save_invstd", c, op);
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_bf16_forward(
    const Tensor& input, const Tensor& residual, const Tensor& weight, const Tensor& bias,
    const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
    double eps, bool relu, const char* op, BatchNormImpl impl, Tensor* relu_bits) {
  check_batch_norm_bf16_forward(input, residual, weight, bias, running_mean, running_var, training,
                                op);
  const auto [c, s] = check_input(input, op);
  if (impl == BatchNormImpl::Bf16ChannelsLast) {  // fast/batch_norm_bf16_nhwc.cpp
    return batch_norm_bf16_nhwc_forward(input, residual, weight, bias, running_mean, running_var,
                                        training, momentum, eps, relu, op, relu_bits);
  }
  const int64_t n = input.size(0), m_total = n * s;
  const Tensor x = contiguous(input);
  const Tensor r = residual.defined() ? contiguous(residual) : Tensor();
  const Tensor w = weight.defined() ? contiguous(weight) : Tensor();
  const Tensor b = bias.defined() ? contiguous(bias) : Tensor();
  Tensor out = empty(x.sizes(), kBFloat16);    // (N, C, *)
  Tensor save_mean = empty({c}, kFloat32);     // (C)
  Tensor save_invstd = empty({c}, kFloat32);   // (C)
  const bool update = training && running_mean.defined();
  const bool update_var = training && running_var.defined();
  const BFloat16* xp = x.data_ptr<BFloat16>();
  const BFloat16* rp = r.defined() ? r.data_ptr<BFloat16>() : nullptr;
  BFloat16* yp = out.data_ptr<BFloat16>();
  const float* wp = w.defined() ? w.data_ptr<float>() : nullptr;
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  float* mean_p = save_mean.data_ptr<float>();
  float* invstd_p = save_invstd.data_ptr<float>();
  parallel_for(0, c, 1, [&](int64_t lo, int64_t hi) {
    alignas(64) float xb[kBlock], rb[kBlock], yb[kBlock];
    for (int64_t ch = lo; ch < hi; ++ch) {
      double mean, var;
      if (training) {  // Note [One-pass batch statistics] in batch_norm.cpp
        const float shift = static_cast<float>(xp[ch * s]);
        double sum = 0, sum_sq = 0;
        for_each_block(n, c, s, ch, [&](int64_t base, int64_t j, int64_t m) {
          widen_bf16(xp + base + j, xb, m);
          run_shifted_sums<float>(xb, m, shift, sum, sum_sq);
        });
        const double mean_d = sum / static_cast<double>(m_total);
        mean = static_cast<double>(shift) + mean_d;
        var = std::max(sum_sq / static_cast<double>(m_total) - mean_d * mean_d, 0.0);
        if (update) {
          float& rm = at(running_mean, ch);
          rm = static_cast<float>((1 - momentum) * rm + momentum * mean);
        }
        if (update_var) {
          float& rv = at(running_var, ch);
          rv = static_cast<float>((1 - momentum) * rv + momentum * var *
                                                           static_cast<double>(m_total) /
                                                           static_cast<double>(m_total - 1));
        }
      } else {
        mean = at(running_mean, ch);
        var = at(running_var, ch);
      }
      mean_p[ch] = static_cast<float>(mean);
      invstd_p[ch] = static_cast<float>(1.0 / std::sqrt(var + eps));
      const Affine<float> affine = affine_coefficients<float>(mean_p[ch], invstd_p[ch], wp, bp, ch);
      const float scale = affine.scale, shift = affine.shift;
      for_each_block(n, c, s, ch, [&](int64_t base, int64_t j, int64_t m) {
        widen_bf16(xp + base + j, xb, m);
        if (rp != nullptr) {
          widen_bf16(rp + base + j, rb, m);
#pragma omp simd
          for (int64_t k = 0; k < m; ++k) yb[k] = std::max(std::fma(xb[k], scale, shift) + rb[k], 0.0f);
        } else if (relu) {
#pragma omp simd
          for (int64_t k = 0; k < m; ++k) yb[k] = std::max(std::fma(xb[k], scale, shift), 0.0f);
        } else {
#pragma omp simd
          for (int64_t k = 0; k < m; ++k) yb[k] = std::fma(xb[k], scale, shift);
        }
        round_to_bf16(yb, yp + base + j, m);
      });
    }
  });
  // The running statistics were written in place (see Note [Saved tensor versions]).
  if (update) running_mean.impl()->storage->bump_version();
  if (update_var) running_var.impl()->storage->bump_version();
  return {out, save_mean, save_invstd};
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_bf16_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& bias,
    const Tensor& save_mean, const Tensor& save_invstd, const Tensor& output, Mask mask,
    bool training, bool need_input, bool need_weight, bool need_bias, Tensor* grad_residual,
    const char* op, BatchNormImpl impl) {
  check_batch_norm_bf16_backward(grad_output, input, weight, save_mean, save_invstd, op);
  const auto [c, s] = check_input(input, op);
  if (mask == Mask::Output) check_like_input(output, "the saved output", input, op);
  LS_CHECK(mask != Mask::Bits || impl == BatchNormImpl::Bf16ChannelsLast, op,
           ": a ReLU mask in bits comes from a channels-last bfloat16 forward, but the input is ",
           input.shape_str(), " in NCHW order; pass the saved output instead");
  if (mask == Mask::Input) check_param(bias, "bias", c, op);
  if (impl == BatchNormImpl::Bf16ChannelsLast) {  // fast/batch_norm_bf16_nhwc.cpp
    return batch_norm_bf16_nhwc_backward(grad_output, input, weight, bias, save_mean, save_invstd,
                                         output, mask, training, need_input, need_weight,
                                         need_bias, grad_residual, op);
  }
  const int64_t n = input.size(0), m_total = n * s;
  const Tensor gy = contiguous(grad_output), x = contiguous(input);
  const Tensor y = mask == Mask::Output ? contiguous(output) : Tensor();
  const Tensor w = weight.defined() ? contiguous(weight) : Tensor();
  const Tensor b = mask == Mask::Input && bias.defined() ? contiguous(bias) : Tensor();
  const Tensor mean_t = contiguous(save_mean), invstd_t = contiguous(save_invstd);
  Tensor grad_input = need_input ? empty(x.sizes(), kBFloat16) : Tensor();
  Tensor grad_weight = need_weight ? empty({c}, kFloat32) : Tensor();
  Tensor grad_bias = need_bias ? empty({c}, kFloat32) : Tensor();
  if (grad_residual != nullptr) *grad_residual = empty(x.sizes(), kBFloat16);
  const BFloat16* gyp = gy.data_ptr<BFloat16>();
  const BFloat16* xp = x.data_ptr<BFloat16>();
  const BFloat16* ypp = y.defined() ? y.data_ptr<BFloat16>() : nullptr;
  const float* wp = w.defined() ? w.data_ptr<float>() : nullptr;
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  const float* mean_p = mean_t.data_ptr<float>();
  const float* invstd_p = invstd_t.data_ptr<float>();
  BFloat16* gxp = need_input ? grad_input.data_ptr<BFloat16>() : nullptr;
  float* gwp = need_weight ? grad_weight.data_ptr<float>() : nullptr;
  float* gbp = need_bias ? grad_bias.data_ptr<float>() : nullptr;
  BFloat16* grp = grad_residual != nullptr ? grad_residual->data_ptr<BFloat16>() : nullptr;
  parallel_for(0, c, 1, [&](int64_t lo, int64_t hi) {
    alignas(64) float gb[kBlock], xb[kBlock], yb[kBlock], ob[kBlock];
    // Widens block [j, j + m) of run `base` of g, x and (Mask::Output) y.
    auto load = [&](int64_t base, int64_t j, int64_t m) {
      widen_bf16(gyp + base + j, gb, m);
      widen_bf16(xp + base + j, xb, m);
      if (mask == Mask::Output) widen_bf16(ypp + base + j, yb, m);
    };
    for (int64_t ch = lo; ch < hi; ++ch) {
      const double mean = mean_p[ch], invstd = invstd_p[ch];
      const float t_mean = static_cast<float>(mean);
      const Affine<float> affine = affine_coefficients<float>(mean_p[ch], invstd_p[ch], wp, bp, ch);
      double sum_g = 0, sum_g_xmu = 0;  // sum g, sum g * (x - mean)
      for_each_block(n, c, s, ch, [&](int64_t base, int64_t j, int64_t m) {
        load(base, j, m);
        if (mask == Mask::Output) {
          grad_sums<float, Mask::Output>(gb, xb, yb, m, t_mean, affine, sum_g, sum_g_xmu,
                                         grp != nullptr ? ob : nullptr);
          if (grp != nullptr) round_to_bf16(ob, grp + base + j, m);  // exact: g or 0
        } else if (mask == Mask::Input) {
          grad_sums<float, Mask::Input>(gb, xb, nullptr, m, t_mean, affine, sum_g, sum_g_xmu);
        } else {
          grad_sums<float, Mask::None>(gb, xb, nullptr, m, t_mean, affine, sum_g, sum_g_xmu);
        }
      });
      const double sum_g_xhat = sum_g_xmu * invstd;
      if (gbp != nullptr) gbp[ch] = static_cast<float>(sum_g);
      if (gwp != nullptr) gwp[ch] = static_cast<float>(sum_g_xhat);
      if (gxp == nullptr) continue;
      const auto [a, bx, c0] = grad_input_coefficients<float>(
          wp != nullptr ? static_cast<double>(wp[ch]) : 1.0, mean, invstd, sum_g, sum_g_xhat,
          m_total, training);
      for_each_block(n, c, s, ch, [&](int64_t base, int64_t j, int64_t m) {
        load(base, j, m);
        if (mask == Mask::Output) {
#pragma omp simd
          for (int64_t q = 0; q < m; ++q) ob[q] = a * (yb[q] > 0.0f ? gb[q] : 0.0f) + bx * xb[q] + c0;
        } else if (mask == Mask::Input) {
#pragma omp simd
          for (int64_t q = 0; q < m; ++q) {
            const bool live = relu_live<Mask::Input>(xb, static_cast<const float*>(nullptr), q, affine);
            ob[q] = a * (live ? gb[q] : 0.0f) + bx * xb[q] + c0;
          }
        } else {
#pragma omp simd
          for (int64_t q = 0; q < m; ++q) ob[q] = a * gb[q] + bx * xb[q] + c0;
        }
        round_to_bf16(ob, gxp + base + j, m);
      });
    }
  });
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace lockstep::native
