// core/native/elementwise.cpp — binary ops with broadcasting, scalar ops,
// comparisons, where, allclose and equal.
//
// Every kernel here has the same shape: check the operands, pick the result
// dtype, convert inputs whose dtype differs, then run one element function
// through map_elements (core/native/elementwise_loop.h), which handles
// broadcasting, strides, vectorisation and threads.
//
// Dtype rules (PyTorch's, simplified):
//   - tensor (op) tensor computes in promote_types(a, b); integer division is
//     true division and gives float32;
//   - tensor (op) scalar keeps a float tensor's dtype; an integer tensor stays
//     integer when the scalar is a whole number, else the result is float32
//     (a bool tensor becomes int64, as bool arithmetic is not arithmetic);
//   - in-place ops keep self's dtype and refuse results it cannot hold.
//
// Read before: core/native/elementwise_loop.h. Read next: core/native/unary.cpp.
#include <cmath>

#include "core/native/elementwise_loop.h"
#include "core/native/cuda_dispatch.h"
#include "core/native/elementwise_rules.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"

namespace lockstep::native {

using detail::map_elements;
using namespace rules;  // Note [Shared kernel rules]

namespace {

// Calls body(fn) with fn(x, y) = x (op) y for element type T.
// Maximum/minimum propagate NaN, like PyTorch (x != x is true only for NaN).
template <class T, class Body>
void with_binary_fn(BinaryOp op, Body&& body) {
  switch (op) {
    case BinaryOp::Add: return body([](T x, T y) { return static_cast<T>(x + y); });
    case BinaryOp::Sub: return body([](T x, T y) { return static_cast<T>(x - y); });
    case BinaryOp::Mul: return body([](T x, T y) { return static_cast<T>(x * y); });
    case BinaryOp::Div: return body([](T x, T y) { return static_cast<T>(x / y); });
    case BinaryOp::Maximum: return body([](T x, T y) { return (x != x || x > y) ? x : y; });
    case BinaryOp::Minimum: return body([](T x, T y) { return (x != x || x < y) ? x : y; });
  }
}

template <class T, class Body>
void with_compare_fn(CompareOp op, Body&& body) {
  switch (op) {
    case CompareOp::Eq: return body([](T x, T y) { return x == y; });
    case CompareOp::Ne: return body([](T x, T y) { return x != y; });
    case CompareOp::Lt: return body([](T x, T y) { return x < y; });
    case CompareOp::Le: return body([](T x, T y) { return x <= y; });
    case CompareOp::Gt: return body([](T x, T y) { return x > y; });
    case CompareOp::Ge: return body([](T x, T y) { return x >= y; });
  }
}

// The shared body of binary_scalar and scalar_binary: out = fn(a, s) or fn(s, a).
Tensor scalar_op(BinaryOp op, const Tensor& a, double s, bool scalar_first) {
  const char* name = binary_op_name(op);
  check_defined(a, name);
  const ScalarType dtype = scalar_result_dtype(op, a.dtype(), s);
  Tensor x = to_dtype(a, dtype);
  Tensor out = result_like(a.sizes(), dtype, {&a});
  dispatch_with_bf16(dtype, name, [&]<class T>() {
    const T sv = scalar_as<T>(s);
    with_binary_fn<T>(op, [&](auto fn) {
      if (scalar_first) {
        map_elements<T, T>(out, {x}, [=](T v) { return fn(sv, v); });
      } else {
        map_elements<T, T>(out, {x}, [=](T v) { return fn(v, sv); });
      }
    });
  });
  return out;
}

// Checks that self can be written in place by an elementwise op.
void check_writable(const Tensor& self, const char* op) {
  LS_CHECK(!detail::has_internal_overlap(self), op, ": self of shape ", self.shape_str(),
           " is an expanded view (several indices share one element) and cannot be written in "
           "place; call .contiguous() or .clone() first");
}

}  // namespace

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Maximum: return "maximum";
    case BinaryOp::Minimum: return "minimum";
  }
  return "binary";
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  LS_DISPATCH_CUDA(a, binary(op, a, b));
  LS_DISPATCH_CUDA(b, binary(op, a, b));
  const char* name = binary_op_name(op);
  check_defined(a, name);
  check_defined(b, name);
  const IntList shape = broadcast_shapes(a.sizes(), b.sizes(), name);
  const ScalarType dtype = binary_result_dtype(op, a, b);
  const Tensor x = to_dtype(a, dtype);
  const Tensor y = to_dtype(b, dtype);
  Tensor out = result_like(shape, dtype, {&a, &b});
  dispatch_with_bf16(dtype, name, [&]<class T>() {
    with_binary_fn<T>(op, [&](auto fn) { map_elements<T, T, T>(out, {x, y}, fn); });
  });
  return out;
}

void binary_(BinaryOp op, const Tensor& self, const Tensor& other) {
  LS_DISPATCH_CUDA(self, binary_(op, self, other));
  LS_DISPATCH_CUDA(other, binary_(op, self, other));
  const std::string name = std::string(binary_op_name(op)) + "_";
  check_defined(self, name.c_str());
  check_defined(other, name.c_str());
  check_binary_inplace(op, self, other, name);
  check_writable(self, name.c_str());
  const Tensor y = to_dtype(other, self.dtype());
  dispatch_with_bf16(self.dtype(), name.c_str(), [&]<class T>() {
    with_binary_fn<T>(op, [&](auto fn) { map_elements<T, T, T>(self, {self, y}, fn); });
  });
}

Tensor binary_scalar(BinaryOp op, const Tensor& a, double s) {
  LS_DISPATCH_CUDA(a, binary_scalar(op, a, s));
  return scalar_op(op, a, s, /*scalar_first=*/false);
}

Tensor scalar_binary(BinaryOp op, double s, const Tensor& a) {
  LS_DISPATCH_CUDA(a, scalar_binary(op, s, a));
  return scalar_op(op, a, s, /*scalar_first=*/true);
}

void binary_scalar_(BinaryOp op, const Tensor& self, double s) {
  LS_DISPATCH_CUDA(self, binary_scalar_(op, self, s));
  const std::string name = std::string(binary_op_name(op)) + "_";
  check_defined(self, name.c_str());
  check_scalar_inplace(op, self, s, name);
  check_writable(self, name.c_str());
  dispatch_with_bf16(self.dtype(), name.c_str(), [&]<class T>() {
    const T sv = scalar_as<T>(s);
    with_binary_fn<T>(op, [&](auto fn) {
      map_elements<T, T>(self, {self}, [=](T v) { return fn(v, sv); });
    });
  });
}

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  LS_DISPATCH_CUDA(a, add(a, b, alpha));
  LS_DISPATCH_CUDA(b, add(a, b, alpha));
  if (alpha == 1.0) return binary(BinaryOp::Add, a, b);
  check_defined(a, "add");
  check_defined(b, "add");
  const IntList shape = broadcast_shapes(a.sizes(), b.sizes(), "add");
  const ScalarType dtype = add_alpha_dtype(a, b, alpha);
  const Tensor x = to_dtype(a, dtype);
  const Tensor y = to_dtype(b, dtype);
  Tensor out = result_like(shape, dtype, {&a, &b});
  dispatch_with_bf16(dtype, "add", [&]<class T>() {
    const T al = scalar_as<T>(alpha);
    map_elements<T, T, T>(out, {x, y}, [=](T u, T v) { return static_cast<T>(u + al * v); });
  });
  return out;
}

Tensor compare(CompareOp op, const Tensor& a, const Tensor& b) {
  LS_DISPATCH_CUDA(a, compare(op, a, b));
  LS_DISPATCH_CUDA(b, compare(op, a, b));
  const char* name = compare_op_name(op);
  check_defined(a, name);
  check_defined(b, name);
  const IntList shape = broadcast_shapes(a.sizes(), b.sizes(), name);
  const ScalarType dtype = promote_types(a.dtype(), b.dtype());
  const Tensor x = to_dtype(a, dtype);
  const Tensor y = to_dtype(b, dtype);
  Tensor out = empty(shape, kBool);
  dispatch_with_bf16(dtype, name, [&]<class T>() {
    with_compare_fn<T>(op, [&](auto fn) { map_elements<bool, T, T>(out, {x, y}, fn); });
  });
  return out;
}

Tensor compare_scalar(CompareOp op, const Tensor& a, double s) {
  LS_DISPATCH_CUDA(a, compare_scalar(op, a, s));
  const char* name = compare_op_name(op);
  check_defined(a, name);
  Tensor out = empty(a.sizes(), kBool);
  dispatch_with_bf16(a.dtype(), name, [&]<class T>() {
    if constexpr (is_floating_v<T>) {
      // Like PyTorch, the scalar takes the tensor's dtype: float32(0.1) == 0.1 holds.
      const T sv = static_cast<T>(s);
      with_compare_fn<T>(op, [&](auto fn) {
        map_elements<bool, T>(out, {a}, [=](T v) { return fn(v, sv); });
      });
    } else {
      // Integers compare in double, so x < 2.5 and uint8 x < 300 are exact.
      with_compare_fn<double>(op, [&](auto fn) {
        map_elements<bool, T>(out, {a}, [=](T v) { return fn(static_cast<double>(v), s); });
      });
    }
  });
  return out;
}

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  LS_DISPATCH_CUDA(condition, where(condition, a, b));
  LS_DISPATCH_CUDA(a, where(condition, a, b));
  LS_DISPATCH_CUDA(b, where(condition, a, b));
  check_defined(condition, "where");
  check_defined(a, "where");
  check_defined(b, "where");
  const IntList shape = where_shape(condition, a, b);
  const ScalarType dtype = promote_types(a.dtype(), b.dtype());
  const Tensor x = to_dtype(a, dtype);
  const Tensor y = to_dtype(b, dtype);
  Tensor out = result_like(shape, dtype, {&a, &b});
  dispatch_with_bf16(dtype, "where", [&]<class T>() {
    map_elements<T, bool, T, T>(out, {condition, x, y}, [](bool c, T u, T v) { return c ? u : v; });
  });
  return out;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  LS_DISPATCH_CUDA(a, allclose(a, b, rtol, atol));
  LS_DISPATCH_CUDA(b, allclose(a, b, rtol, atol));
  check_defined(a, "allclose");
  check_defined(b, "allclose");
  const IntList shape = broadcast_shapes(a.sizes(), b.sizes(), "allclose");
  // |a - b| <= atol + rtol * |b|, elementwise in float64; NaN is never close,
  // equal infinities are (the a == b test).
  Tensor close = empty(shape, kBool);
  map_elements<bool, double, double>(
      close, {to_dtype(a, kFloat64), to_dtype(b, kFloat64)},
      [=](double u, double v) { return u == v || std::abs(u - v) <= atol + rtol * std::abs(v); });
  const bool* c = close.data_ptr<bool>();
  bool all = true;
  const int64_t n = close.numel();
#pragma omp simd reduction(&& : all)
  for (int64_t i = 0; i < n; ++i) all = all && c[i];
  return all;
}

bool equal(const Tensor& a, const Tensor& b) {
  LS_DISPATCH_CUDA(a, equal(a, b));
  LS_DISPATCH_CUDA(b, equal(a, b));
  check_defined(a, "equal");
  check_defined(b, "equal");
  if (a.sizes() != b.sizes()) return false;
  const Tensor same = compare(CompareOp::Eq, a, b);
  const bool* c = same.data_ptr<bool>();
  bool all = true;
  const int64_t n = same.numel();
#pragma omp simd reduction(&& : all)
  for (int64_t i = 0; i < n; ++i) all = all && c[i];
  return all;
}

}  // namespace lockstep::native
