// core/native/layer_norm_rules.h — the operand checks and row sizes of layer
// norm, shared by core/native/layer_norm.cpp and core/cuda/layer_norm.cu (see
// Note [Shared kernel rules] in core/native/elementwise_rules.h).
//
// Layer norm reads its input as M rows of D elements: D = prod(normalized_shape),
// M = the product of the leading dims.
//
// Read before: core/native/layer_norm.cpp. Read next: core/cuda/layer_norm.cu.
#pragma once

#include <cstdint>

#include "core/native/native.h"
#include "core/shape.h"

namespace lockstep::native::rules {

// `op` starts every message. `check_more` runs after the defined check (the CUDA
// kernel checks devices and dtypes there).
template <class MoreChecks>
void check_layer_norm(const Tensor& input, const IntList& normalized_shape, const Tensor& weight,
                      const Tensor& bias, const char* op, MoreChecks&& check_more) {
  LS_CHECK(input.defined(), op, ": input is an undefined tensor");
  check_more();
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  bool trailing = k >= 1 && k <= input.dim();
  for (int64_t i = 0; trailing && i < k; ++i) {
    trailing = input.size(input.dim() - k + i) == normalized_shape[i];
  }
  LS_CHECK(trailing, op, ": normalized_shape ", shape_str(normalized_shape),
           " must be non-empty and equal the trailing dims of the input ", input.shape_str());
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    const char* what = p == &weight ? "weight" : "bias";
    LS_CHECK(p->sizes() == normalized_shape, op, ": ", what, " has shape ", p->shape_str(),
             " but normalized_shape is ", shape_str(normalized_shape), "; they must match");
    LS_CHECK(p->dtype() == input.dtype(), op, ": ", what, " dtype ", dtype_name(p->dtype()),
             " differs from input dtype ", dtype_name(input.dtype()));
  }
}

// D, the row length: prod(normalized_shape).
inline int64_t row_length(const IntList& normalized_shape) {
  int64_t d = 1;
  for (int64_t s : normalized_shape) d *= s;
  return d;
}

// M, the number of rows: the product of the leading (not normalised) dims.
inline int64_t num_rows(const Tensor& input, const IntList& normalized_shape) {
  int64_t m = 1;
  const int64_t lead = input.dim() - static_cast<int64_t>(normalized_shape.size());
  for (int64_t i = 0; i < lead; ++i) m *= input.size(i);
  return m;
}

// layer_norm_backward: grad_output has the input's shape.
inline void check_backward_grad(const Tensor& grad_output, const Tensor& input, const char* op) {
  LS_CHECK(grad_output.defined() && grad_output.sizes() == input.sizes(), op, ": grad_output ",
           grad_output.defined() ? grad_output.shape_str() : "(undefined)",
           " must have the input's shape ", input.shape_str());
}

// layer_norm_backward: the forward's statistics, one value per row.
inline void check_backward_stats(const Tensor& mean, const Tensor& rstd, int64_t m,
                                 const char* op) {
  LS_CHECK(mean.numel() == m && rstd.numel() == m, op, ": mean ", mean.shape_str(), " and rstd ",
           rstd.shape_str(), " must hold one value per row (", m, ")");
}

}  // namespace lockstep::native::rules
