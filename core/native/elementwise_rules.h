// core/native/elementwise_rules.h — the operand checks and dtype rules of the
// elementwise ops, shared by the CPU kernels (core/native/elementwise.cpp) and
// the CUDA kernels (core/cuda/elementwise.cu); check_defined is also used by the
// reductions, unary ops and softmax on both devices.
//
// § Note [Shared kernel rules]
// A CPU kernel and its CUDA twin must accept the same operands, compute the same
// result shape and dtype, and throw the same messages (tests compare them). So
// those rules live once, in a plain C++ header per op family (this file,
// reduce_rules.h, matmul_rules.h, linear_rules.h, index_rules.h,
// layer_norm_rules.h; optim_update.h for the optimizers' element formulas),
// which both the .cpp and the .cu file include; only the element loop differs
// between devices.
// A rule that also checks devices takes the device check as a callable, run
// where the CUDA kernel checks them (the CPU kernels pass a no-op or their own).
//
// Read before: core/native/native.h. Read next: core/native/elementwise.cpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/native/native.h"
#include "core/shape.h"

namespace lockstep::native::rules {

inline void check_defined(const Tensor& t, const char* op) {
  LS_CHECK(t.defined(), op, ": got an undefined tensor (default-constructed, or a grad that no "
                            "backward has written yet)");
}

inline bool is_integral(ScalarType t) { return !is_floating_point(t); }  // bool counts as integral

// A scalar an integer tensor can combine with and stay integer: whole and in int64 range.
inline bool is_whole(double s) {
  return std::isfinite(s) && s == std::trunc(s) && std::abs(s) < 9.2e18;
}

// The scalar s as element type T (through int64 for integer T: a direct double ->
// uint8 conversion of an out-of-range value is undefined behaviour).
template <class T>
T scalar_as(double s) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(s);
  } else if constexpr (is_floating_v<T>) {  // Half, BFloat16: rounded from float
    return T(static_cast<float>(s));
  } else {
    return static_cast<T>(static_cast<int64_t>(s));
  }
}

inline const char* compare_op_name(CompareOp op) {
  switch (op) {
    case CompareOp::Eq: return "eq";
    case CompareOp::Ne: return "ne";
    case CompareOp::Lt: return "lt";
    case CompareOp::Le: return "le";
    case CompareOp::Gt: return "gt";
    case CompareOp::Ge: return "ge";
  }
  return "compare";
}

inline void check_not_bool_sub(BinaryOp op, ScalarType dtype) {
  LS_CHECK(!(op == BinaryOp::Sub && dtype == kBool),
           "sub: subtracting bool tensors is not supported; convert them with .to(ls::kInt64) "
           "first");
}

// The dtype `a (op) s` computes in; see the dtype rules in core/native/elementwise.cpp.
inline ScalarType scalar_result_dtype(BinaryOp op, ScalarType a, double s) {
  if (is_floating_point(a)) return a;
  if (op == BinaryOp::Div || !is_whole(s)) return kFloat32;
  return a == kBool ? kInt64 : a;
}

// The dtype `a (op) b` computes in: result_type (Note [Type promotion categories] in
// core/type_promotion.cpp), and integer division is true division.
inline ScalarType binary_result_dtype(BinaryOp op, const Tensor& a, const Tensor& b) {
  ScalarType dtype = result_type(a, b);
  if (op == BinaryOp::Div && is_integral(dtype)) dtype = kFloat32;  // true division
  check_not_bool_sub(op, dtype);
  return dtype;
}

// self (op)= other: other broadcasts to self's shape and self's dtype holds the result.
inline void check_binary_inplace(BinaryOp op, const Tensor& self, const Tensor& other,
                                 const std::string& name) {
  const IntList shape = broadcast_shapes(self.sizes(), other.sizes(), name.c_str());
  LS_CHECK(shape == self.sizes(), name, ": other of shape ", other.shape_str(),
           " cannot be broadcast to self's shape ", self.shape_str(),
           "; an in-place op cannot change self's shape, use the out-of-place op instead");
  LS_CHECK(!(is_integral(self.dtype()) &&
             (op == BinaryOp::Div || is_floating_point(other.dtype()))),
           name, ": the result would be floating point but self has dtype ", self.dtype(),
           " (other: ", other.dtype(), "); use the out-of-place op, or convert self to float");
  check_not_bool_sub(op, self.dtype());
}

// self (op)= s: self's dtype must hold the result.
inline void check_scalar_inplace(BinaryOp op, const Tensor& self, double s,
                                 const std::string& name) {
  LS_CHECK(scalar_result_dtype(op, self.dtype(), s) == self.dtype(), name, ": self has dtype ",
           self.dtype(), " but the result of ", binary_op_name(op), " with ", s,
           " would not; use the out-of-place op, or convert self first");
}

// The dtype of add(a, b, alpha) with alpha != 1: a fractional alpha needs floats.
inline ScalarType add_alpha_dtype(const Tensor& a, const Tensor& b, double alpha) {
  const ScalarType dtype = promote_types(a.dtype(), b.dtype());
  LS_CHECK(is_floating_point(dtype) || (is_whole(alpha) && dtype != kBool),
           "add: alpha = ", alpha, " needs a floating point result but the inputs are ",
           a.dtype(), " and ", b.dtype(), "; use a whole alpha or convert the inputs to float");
  return dtype;
}

// where's result shape: condition, a and b broadcast together; condition must be bool.
inline IntList where_shape(const Tensor& condition, const Tensor& a, const Tensor& b) {
  LS_CHECK(condition.dtype() == kBool, "where: condition must be a bool tensor but has dtype ",
           condition.dtype(), "; make one with a comparison such as x.gt(0)");
  const IntList ab = broadcast_shapes(a.sizes(), b.sizes(), "where");
  return broadcast_shapes(condition.sizes(), ab, "where");
}

}  // namespace lockstep::native::rules
