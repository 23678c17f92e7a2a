// core/native/reduce_rules.h — the argument checks and result shapes of the
// reductions, shared by core/native/reduce.cpp and core/cuda/reduce.cu (see
// Note [Shared kernel rules] in core/native/elementwise_rules.h).
//
// Both kernels see a reduction as a contiguous (A, R, B) array reduced over its
// middle dim; this file says which dims are reduced, what shape and dtype the
// result has, and which calls are errors.
//
// softmax's backward checks live here too (softmax is a normalised reduction).
//
// Read before: core/native/elementwise_rules.h. Read next: core/native/reduce.cpp.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/native/elementwise_rules.h"

namespace lockstep::native::rules {

// The type a sum of T accumulates in: double for floats, int64 for integers and bool.
template <class T>
using SumAcc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

// The dtype sum() returns: integer and bool sums give int64.
inline ScalarType sum_dtype(ScalarType t) { return is_floating_point(t) ? t : kInt64; }

// mean is defined for floating tensors only.
inline void check_mean_dtype(const Tensor& t) {
  LS_CHECK(is_floating_point(t.dtype()), "mean: expected a floating point tensor but "
           "got ", t.dtype(), "; convert with .to(ls::kFloat32) first");
}

// Which dims of t `dims` names (empty names all); repeats are an error.
inline std::vector<bool> reduced_mask(const Tensor& t, const IntList& dims, const char* op) {
  const int64_t ndim = t.dim();
  std::vector<bool> mask(static_cast<size_t>(ndim), dims.empty());
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, ndim, op);
    if (ndim == 0) continue;  // a 0-d tensor accepts dim 0 / -1 and has nothing to reduce
    LS_CHECK(!mask[w], op, ": dim ", d, " appears more than once in the dims to reduce");
    mask[w] = true;
  }
  return mask;
}

// t's shape after reducing the masked dims: size 1 with keepdim, else removed.
inline IntList reduced_shape(const IntList& sizes, const std::vector<bool>& mask, bool keepdim) {
  IntList out;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (!mask[d]) {
      out.push_back(sizes[d]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

// max/min/argmax/argmin over one dim: t as (A, R, B) and the result's shape.
struct DimReduction {
  int64_t A = 1, R = 1, B = 1;
  IntList out_shape;
};

inline DimReduction dim_reduction(const Tensor& t, int64_t dim, bool keepdim, const char* op) {
  check_defined(t, op);
  const int64_t ndim = t.dim();
  const int64_t d = wrap_dim(dim, ndim, op);
  DimReduction r;
  r.R = ndim == 0 ? 1 : t.size(d);
  LS_CHECK(r.R > 0, op, ": cannot reduce over dim ", dim, " of size 0 (shape ", t.shape_str(),
           "); there is no maximum or minimum of nothing");
  for (int64_t i = 0; i < ndim; ++i) {
    if (i < d) r.A *= t.size(i);
    if (i > d) r.B *= t.size(i);
  }
  std::vector<bool> mask(static_cast<size_t>(ndim), false);
  if (ndim > 0) mask[d] = true;
  r.out_shape = reduced_shape(t.sizes(), mask, keepdim);
  return r;
}

// max/min of every element: t must have one.
inline void check_extreme_all(const Tensor& t, const char* op) {
  check_defined(t, op);
  LS_CHECK(t.numel() > 0, op, ": the tensor is empty (shape ", t.shape_str(),
           "); there is no maximum or minimum of nothing");
}

// The dims sum_to sums (keepdim) to bring grad (sizes != shape) down to `shape`.
inline IntList sum_to_dims(const Tensor& grad, const IntList& shape) {
  const IntList& sizes = grad.sizes();
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  bool ok = lead >= 0;
  IntList dims;
  for (int64_t d = 0; ok && d < grad.dim(); ++d) {
    if (d < lead) {
      dims.push_back(d);
    } else if (shape[d - lead] != sizes[d]) {
      ok = shape[d - lead] == 1;
      dims.push_back(d);
    }
  }
  LS_CHECK(ok, "sum_to: cannot sum a gradient of shape ", shape_str(sizes), " down to shape ",
           shape_str(shape), "; the target must broadcast to the gradient's shape");
  return dims;
}

// softmax_backward's operands: both defined, of one shape. `check_devices` runs
// between those checks (the CUDA kernel checks that both are on its device).
template <class DeviceCheck>
void check_softmax_backward(const Tensor& grad_output, const Tensor& output, const char* op,
                            DeviceCheck&& check_devices) {
  check_defined(grad_output, op);
  check_defined(output, op);
  check_devices();
  LS_CHECK(grad_output.sizes() == output.sizes(), op, ": grad_output has shape ",
           grad_output.shape_str(), " but output has shape ", output.shape_str(),
           "; they must match");
}

}  // namespace lockstep::native::rules
