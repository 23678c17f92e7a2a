// core/native/linear_rules.h — the operand checks and shapes of linear and its
// backward, shared by core/native/linear.cpp and core/cuda/linear.cu (see
// Note [Shared kernel rules] in core/native/elementwise_rules.h).
//
// Read before: core/native/linear.cpp. Read next: core/cuda/linear.cu.
#pragma once

#include <cstdint>

#include "core/native/native.h"

namespace lockstep::native::rules {

// Shapes and dtypes of linear's operands; every error names both shapes.
// `check_devices` runs after the defined check; `dtype_ok` says which dtype the
// device's kernel takes, and `dtype_rule` ends the message when it refuses one.
template <class DeviceCheck>
void check_linear(const Tensor& input, const Tensor& weight, const Tensor& bias,
                  DeviceCheck&& check_devices, bool (*dtype_ok)(ScalarType),
                  const char* dtype_rule) {
  LS_CHECK(input.defined() && weight.defined(), "linear: input and weight must be defined tensors");
  check_devices();
  LS_CHECK(weight.dim() == 2, "linear: weight must be 2-d (out_features, in_features), got ",
           weight.shape_str());
  LS_CHECK(input.dim() >= 1,
           "linear: input must have at least 1 dim (*, in_features), got a 0-d tensor");
  LS_CHECK(input.size(-1) == weight.size(1), "linear: input ", input.shape_str(),
           " has in_features ", input.size(-1), " but weight ", weight.shape_str(), " expects ",
           weight.size(1), "; the last dim of input must equal weight.size(1)");
  LS_CHECK(dtype_ok(input.dtype()) && input.dtype() == weight.dtype(), "linear: input (",
           dtype_name(input.dtype()), ") and weight (", dtype_name(weight.dtype()), dtype_rule);
  if (bias.defined()) {
    LS_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "linear: bias must have shape [",
             weight.size(0), "] (out_features of weight ", weight.shape_str(), "), got ",
             bias.shape_str());
    LS_CHECK(bias.dtype() == weight.dtype(), "linear: bias dtype ", dtype_name(bias.dtype()),
             " differs from weight dtype ", dtype_name(weight.dtype()));
  }
}

// M: the number of rows once the leading dims of x are folded together.
inline int64_t rows_of(const Tensor& x) {
  int64_t m = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) m *= x.size(d);
  return m;
}

// x's shape with the last dim replaced by `last`.
inline IntList with_last(const IntList& sizes, int64_t last) {
  IntList out = sizes;
  out.back() = last;
  return out;
}

// linear_backward's weight, needed for grad_input: (out, in) with grad_output's out and dtype.
inline void check_backward_weight(const Tensor& weight, const Tensor& grad_output, int64_t out) {
  LS_CHECK(weight.defined() && weight.dim() == 2 && weight.size(0) == out &&
               weight.dtype() == grad_output.dtype(),
           "linear_backward: weight ", weight.defined() ? weight.shape_str() : "(undefined)",
           " does not match grad_output ", grad_output.shape_str());
}

// linear_backward's input, needed for grad_weight: grad_output's M rows and dtype.
inline void check_backward_input(const Tensor& input, const Tensor& grad_output, int64_t m) {
  LS_CHECK(input.defined() && input.dim() >= 1 && rows_of(input) == m &&
               input.dtype() == grad_output.dtype(),
           "linear_backward: input ", input.defined() ? input.shape_str() : "(undefined)",
           " does not match grad_output ", grad_output.shape_str());
}

}  // namespace lockstep::native::rules
