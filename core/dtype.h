// core/dtype.h — the element types a Tensor can hold, and dispatch over them.
//
// f32 is the default; f64 is used by gradcheck; i64/i32/u8/bool for indices,
// labels and masks; f16/bf16 are storage types (convert to f32 to compute).
// `dispatch(dtype, op, fn)` calls the templated lambda `fn.template operator()<T>()`
// with the C++ type T of `dtype`; kernels use it to stay type-generic.
// Read before: core/error.h. Read next: core/half.h, core/device.h, core/storage.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "core/half.h"

namespace lockstep {

enum class ScalarType : uint8_t { Float32, Float64, Int64, Int32, UInt8, Bool, Float16, BFloat16 };
using Dtype = ScalarType;

inline constexpr ScalarType kFloat32 = ScalarType::Float32;
inline constexpr ScalarType kFloat = ScalarType::Float32;
inline constexpr ScalarType kFloat64 = ScalarType::Float64;
inline constexpr ScalarType kDouble = ScalarType::Float64;
inline constexpr ScalarType kInt64 = ScalarType::Int64;
inline constexpr ScalarType kLong = ScalarType::Int64;
inline constexpr ScalarType kInt32 = ScalarType::Int32;
inline constexpr ScalarType kInt = ScalarType::Int32;
inline constexpr ScalarType kUInt8 = ScalarType::UInt8;
inline constexpr ScalarType kByte = ScalarType::UInt8;
inline constexpr ScalarType kBool = ScalarType::Bool;
inline constexpr ScalarType kFloat16 = ScalarType::Float16;
inline constexpr ScalarType kHalf = ScalarType::Float16;
inline constexpr ScalarType kBFloat16 = ScalarType::BFloat16;

size_t element_size(ScalarType t);
const char* dtype_name(ScalarType t);  // "float32", "int64", ...
inline bool is_floating_point(ScalarType t) {
  return t == kFloat32 || t == kFloat64 || t == kFloat16 || t == kBFloat16;
}
inline std::ostream& operator<<(std::ostream& os, ScalarType t) { return os << dtype_name(t); }

// The ScalarType of a C++ element type: dtype_of<float>() == kFloat32.
template <class T>
constexpr ScalarType dtype_of();
template <> constexpr ScalarType dtype_of<float>() { return kFloat32; }
template <> constexpr ScalarType dtype_of<double>() { return kFloat64; }
template <> constexpr ScalarType dtype_of<int64_t>() { return kInt64; }
template <> constexpr ScalarType dtype_of<int32_t>() { return kInt32; }
template <> constexpr ScalarType dtype_of<uint8_t>() { return kUInt8; }
template <> constexpr ScalarType dtype_of<bool>() { return kBool; }
template <> constexpr ScalarType dtype_of<Half>() { return kFloat16; }
template <> constexpr ScalarType dtype_of<BFloat16>() { return kBFloat16; }

// Calls fn.template operator()<T>() for every dtype, including f16/bf16.
template <class F>
decltype(auto) dispatch_all(ScalarType t, F&& fn) {
  switch (t) {
    case kFloat32: return fn.template operator()<float>();
    case kFloat64: return fn.template operator()<double>();
    case kInt64: return fn.template operator()<int64_t>();
    case kInt32: return fn.template operator()<int32_t>();
    case kUInt8: return fn.template operator()<uint8_t>();
    case kBool: return fn.template operator()<bool>();
    case kFloat16: return fn.template operator()<Half>();
    case kBFloat16: return fn.template operator()<BFloat16>();
  }
  throw Error("dispatch_all: unknown dtype");
}

// Calls fn for the dtypes lockstep computes in (all but f16/bf16); `op` names the
// caller in the error thrown for f16/bf16.
template <class F>
decltype(auto) dispatch(ScalarType t, const char* op, F&& fn) {
  switch (t) {
    case kFloat32: return fn.template operator()<float>();
    case kFloat64: return fn.template operator()<double>();
    case kInt64: return fn.template operator()<int64_t>();
    case kInt32: return fn.template operator()<int32_t>();
    case kUInt8: return fn.template operator()<uint8_t>();
    case kBool: return fn.template operator()<bool>();
    default: break;
  }
  throw Error(detail::str(op, ": dtype ", dtype_name(t),
                          " is a storage-only type; convert with .to(ls::kFloat32) first"));
}

// Like dispatch, for float32/float64 only (transcendental functions, softmax, matmul...).
template <class F>
decltype(auto) dispatch_floating(ScalarType t, const char* op, F&& fn) {
  if (t == kFloat32) return fn.template operator()<float>();
  if (t == kFloat64) return fn.template operator()<double>();
  throw Error(detail::str(op, ": expected a float32 or float64 tensor but got ", dtype_name(t),
                          "; convert with .to(ls::kFloat32)"));
}

// True for the C++ types of floating dtypes, the 16-bit storage types included.
template <class T>
inline constexpr bool is_floating_v =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Like dispatch, and bfloat16 too (T = BFloat16), for kernels whose element
// functions compute through float: a BFloat16 operand widens to float exactly
// and the result is rounded to bfloat16 once (Note [bfloat16 elementwise] in
// core/native/elementwise_loop.h).
template <class F>
decltype(auto) dispatch_with_bf16(ScalarType t, const char* op, F&& fn) {
  if (t == kBFloat16) return fn.template operator()<BFloat16>();
  return dispatch(t, op, std::forward<F>(fn));
}

// Like dispatch_floating, and bfloat16 too: calls fn.template operator()<S, C>()
// with S the stored element type and C the type elements compute in
// (float/float, double/double, BFloat16/float).
template <class F>
decltype(auto) dispatch_floating_bf16(ScalarType t, const char* op, F&& fn) {
  if (t == kBFloat16) return fn.template operator()<BFloat16, float>();
  if (t == kFloat32) return fn.template operator()<float, float>();
  if (t == kFloat64) return fn.template operator()<double, double>();
  throw Error(detail::str(op, ": expected a float32, float64 or bfloat16 tensor but got ",
                          dtype_name(t), "; convert with .to(ls::kFloat32)"));
}

// Converts one element between C++ element types; f16/bf16 go through float.
template <class To, class From>
To convert(From v) {
  constexpr bool from16 = std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>;
  constexpr bool to16 = std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>;
  if constexpr (from16 && to16) {
    return To(static_cast<float>(v));
  } else if constexpr (from16) {
    return static_cast<To>(static_cast<float>(v));
  } else if constexpr (to16) {
    return To(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// The dtype two operands compute in (PyTorch's type promotion, simplified:
// float beats int, wider beats narrower, bool is lowest).
ScalarType promote_types(ScalarType a, ScalarType b);

}  // namespace lockstep
