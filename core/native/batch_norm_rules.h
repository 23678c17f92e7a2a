// core/native/batch_norm_rules.h — the operand checks and sizes of batch norm
// (plain and fused with ReLU), shared by core/native/batch_norm.cpp and
// core/cuda/batch_norm.cu (see Note [Shared kernel rules] in
// core/native/elementwise_rules.h).
//
// Batch norm reads its input (N, C, *) as C channels of M = N * S values,
// S = the product of the trailing dims.
//
// Read before: core/native/batch_norm.cpp. Read next: core/cuda/batch_norm.cu.
#pragma once

#include <cstdint>
#include <utility>

#include "core/native/native.h"
#include "core/shape.h"

namespace lockstep::native::rules {

// Checks that a per-channel tensor (weight, bias, running or saved statistics)
// is undefined or (C) of the input's dtype.
inline void check_channel_vector(const Tensor& t, const char* what, int64_t channels,
                                 ScalarType dtype, const char* op) {
  if (!t.defined()) return;
  LS_CHECK(t.dim() == 1 && t.size(0) == channels, op, ": ", what, " must have shape [", channels,
           "] (one value per channel) but got ", t.shape_str());
  LS_CHECK(t.dtype() == dtype, op, ": ", what, " is ", t.dtype(), " but input is ", dtype,
           "; convert with .to(...)");
}

// Training needs more than one value per channel (S values per image); eval
// needs the running statistics.
inline void check_statistics_source(const Tensor& input, int64_t s, const Tensor& running_mean,
                                    const Tensor& running_var, bool training, const char* op) {
  if (training) {
    LS_CHECK(input.size(0) * s > 1, op,
             ": expected more than 1 value per channel when training, but got input shape ",
             input.shape_str(), "; use a larger batch or eval mode");
  } else {
    LS_CHECK(running_mean.defined() && running_var.defined(), op,
             ": eval mode needs running_mean and running_var; pass them, or use training mode");
  }
}

// Channel count C and the size S of the trailing dims of a float (N, C, *) input.
inline std::pair<int64_t, int64_t> channels_and_spatial(const Tensor& input, const char* op) {
  lockstep::detail::check_defined(input, op);
  LS_CHECK(input.dim() >= 2, op, ": expected an input (N, C) or (N, C, *) but got shape ",
           input.shape_str());
  LS_CHECK(input.dtype() == kFloat32 || input.dtype() == kFloat64, op,
           ": expected a float32 or float64 input but got ", input.dtype(),
           "; convert with .to(ls::kFloat32)");
  const IntList& s = input.sizes();
  return {s[1], numel_of(IntList(s.begin() + 2, s.end()))};
}

// The forward's checks; returns {C, S}. `check_more` runs once the input is
// known to be a float (N, C, *) tensor (the CUDA kernel checks devices there).
template <class MoreChecks>
std::pair<int64_t, int64_t> check_batch_norm_forward(const Tensor& input, const Tensor& weight,
                                                     const Tensor& bias, const Tensor& running_mean,
                                                     const Tensor& running_var, bool training,
                                                     const char* op, MoreChecks&& check_more) {
  const auto [c, s] = channels_and_spatial(input, op);
  check_more();
  check_channel_vector(weight, "weight", c, input.dtype(), op);
  check_channel_vector(bias, "bias", c, input.dtype(), op);
  check_channel_vector(running_mean, "running_mean", c, input.dtype(), op);
  check_channel_vector(running_var, "running_var", c, input.dtype(), op);
  check_statistics_source(input, s, running_mean, running_var, training, op);
  return {c, s};
}

// The backward's checks; returns {C, S}. relu_output: undefined, or the fused
// forward's output. `check_more` runs once grad_output is known to be defined.
template <class MoreChecks>
std::pair<int64_t, int64_t> check_batch_norm_backward(const Tensor& grad_output, const Tensor& input,
                                                      const Tensor& weight, const Tensor& save_mean,
                                                      const Tensor& save_invstd,
                                                      const Tensor& relu_output, const char* op,
                                                      MoreChecks&& check_more) {
  const auto [c, s] = channels_and_spatial(input, op);
  lockstep::detail::check_defined(grad_output, op);
  check_more();
  LS_CHECK(grad_output.sizes() == input.sizes() && grad_output.dtype() == input.dtype(), op,
           ": grad_output (", grad_output.dtype(), " ", grad_output.shape_str(),
           ") must have the input's shape and dtype (", input.dtype(), " ", input.shape_str(), ")");
  LS_CHECK(!relu_output.defined() ||
               (relu_output.sizes() == input.sizes() && relu_output.dtype() == input.dtype()),
           op, ": the saved output (", relu_output.dtype(), " ", relu_output.shape_str(),
           ") must have the input's shape and dtype (", input.dtype(), " ", input.shape_str(),
           "); pass the tensor batch_norm_relu_forward returned");
  check_channel_vector(weight, "weight", c, input.dtype(), op);
  lockstep::detail::check_defined(save_mean, op);
  lockstep::detail::check_defined(save_invstd, op);
  check_channel_vector(save_mean, "save_mean", c, input.dtype(), op);
  check_channel_vector(save_invstd, "save_invstd", c, input.dtype(), op);
  return {c, s};
}

}  // namespace lockstep::native::rules
