// core/type_promotion.cpp — result_type: PyTorch's type promotion of two tensors.
//
// § Note [Type promotion categories]
// Dtypes fall in categories ranked bool < integer < floating. promote_types
// (core/dtype.h) is the lattice: the wider type of the higher category wins.
// result_type refines it the way PyTorch does for operands that carry no size:
// a 0-d tensor (a loss, a clip coefficient) decides the dtype only when its
// category is higher than every dimensioned operand's, so
//   float32 (N) * float64 ()  -> float32      (same category: the dimensioned one decides)
//   int64   (N) * float64 ()  -> float64      (the 0-d one is of a higher category)
//   uint8   (N) + int64 ()    -> uint8
//   bool    (N) + int64 ()    -> int64        (bool is its own, lowest, category)
// C++ scalars (the operators taking double or an integral type) follow Note
// [Scalar type promotion] in core/tensor.h: a floating scalar with an integer
// tensor gives float32, the default float dtype.
// Read before: core/dtype.h. Read next: core/native/elementwise_rules.h.
#include "core/tensor.h"

namespace lockstep {

namespace {
// PyTorch's combine_categories: `higher` from the operands that rank first
// (dimensioned), `lower` from the 0-d ones.
ScalarType combine_categories(ScalarType higher, ScalarType lower) {
  if (is_floating_point(higher)) return higher;
  if (higher == kBool || is_floating_point(lower)) return promote_types(higher, lower);
  return higher;
}
}  // namespace

ScalarType result_type(const Tensor& a, const Tensor& b) {
  const bool a_dims = a.dim() > 0, b_dims = b.dim() > 0;
  if (a_dims == b_dims) return promote_types(a.dtype(), b.dtype());
  return a_dims ? combine_categories(a.dtype(), b.dtype())
                : combine_categories(b.dtype(), a.dtype());
}

}  // namespace lockstep
