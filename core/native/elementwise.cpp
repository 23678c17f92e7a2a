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
#include "core/native/native.h"

namespace lockstep::native {

using detail::map_elements;

namespace {

void check_defined(const Tensor& t, const char* op) {
  LS_CHECK(t.defined(), op, ": got an undefined tensor (default-constructed, or a grad that no "
                            "backward has written yet)");
}

bool is_integral(ScalarType t) { return !is_floating_point(t); }  // bool counts as integral

// A scalar an integer tensor can combine with and stay integer: whole and in int64 range.
bool is_whole(double s) { return std::isfinite(s) && s == std::trunc(s) && std::abs(s) < 9.2e18; }

// The scalar s as element type T (through int64 for integer T: a direct double ->
// uint8 conversion of an out-of-range value is undefined behaviour).
template <class T>
T scalar_as(double s) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(s);
  } else {
    return static_cast<T>(static_cast<int64_t>(s));
  }
}

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

const char* compare_op_name(CompareOp op) {
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

void check_not_bool_sub(BinaryOp op, ScalarType dtype) {
  LS_CHECK(!(op == BinaryOp::Sub && dtype == kBool),
           "sub: subtracting bool tensors is not supported; convert them with .to(ls::kInt64) "
           "first");
}

// The dtype `a (op) s` computes in; see the dtype rules at the top of the file.
ScalarType scalar_result_dtype(BinaryOp op, ScalarType a, double s) {
  if (is_floating_point(a)) return a;
  if (op == BinaryOp::Div || !is_whole(s)) return kFloat32;
  return a == kBool ? kInt64 : a;
}

// The shared body of binary_scalar and scalar_binary: out = fn(a, s) or fn(s, a).
Tensor scalar_op(BinaryOp op, const Tensor& a, double s, bool scalar_first) {
  const char* name = binary_op_name(op);
  check_defined(a, name);
  const ScalarType dtype = scalar_result_dtype(op, a.dtype(), s);
  Tensor x = to_dtype(a, dtype);
  Tensor out = empty(a.sizes(), dtype);
  dispatch(dtype, name, [&]<class T>() {
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
  const char* name = binary_op_name(op);
  check_defined(a, name);
  check_defined(b, name);
  const IntList shape = broadcast_shapes(a.sizes(), b.sizes(), name);
  ScalarType dtype = promote_types(a.dtype(), b.dtype());
  if (op == BinaryOp::Div && is_integral(dtype)) dtype = kFloat32;  // true division
  check_not_bool_sub(op, dtype);
  const Tensor x = to_dtype(a, dtype);
  const Tensor y = to_dtype(b, dtype);
  Tensor out = empty(shape, dtype);
  dispatch(dtype, name, [&]<class T>() {
    with_binary_fn<T>(op, [&](auto fn) { map_elements<T, T, T>(out, {x, y}, fn); });
  });
  return out;
}

void binary_(BinaryOp op, const Tensor& self, const Tensor& other) {
  const std::string name = std::string(binary_op_name(op)) + "_";
  check_defined(self, name.c_str());
  check_defined(other, name.c_str());
  const IntList shape = broadcast_shapes(self.sizes(), other.sizes(), name.c_str());
  LS_CHECK(shape == self.sizes(), name, ": other of shape ", other.shape_str(),
           " cannot be broadcast to self's shape ", self.shape_str(),
           "; an in-place op cannot change self's shape, use the out-of-place op instead");
  LS_CHECK(!(is_integral(self.dtype()) &&
             (op == BinaryOp::Div || is_floating_point(other.dtype()))),
           name, ": the result would be floating point but self has dtype ", self.dtype(),
           " (other: ", other.dtype(), "); use the out-of-place op, or convert self to float");
  check_not_bool_sub(op, self.dtype());
  check_writable(self, name.c_str());
  const Tensor y = to_dtype(other, self.dtype());
  dispatch(self.dtype(), name.c_str(), [&]<class T>() {
    with_binary_fn<T>(op, [&](auto fn) { map_elements<T, T, T>(self, {self, y}, fn); });
  });
}

Tensor binary_scalar(BinaryOp op, const Tensor& a, double s) {
  return scalar_op(op, a, s, /*scalar_first=*/false);
}

Tensor scalar_binary(BinaryOp op, double s, const Tensor& a) {
  return scalar_op(op, a, s, /*scalar_first=*/true);
}

void binary_scalar_(BinaryOp op, const Tensor& self, double s) {
  const std::string name = std::string(binary_op_name(op)) + "_";
  check_defined(self, name.c_str());
  LS_CHECK(scalar_result_dtype(op, self.dtype(), s) == self.dtype(), name, ": self has dtype ",
           self.dtype(), " but the result of ", binary_op_name(op), " with ", s,
           " would not; use the out-of-place op, or convert self first");
  check_writable(self, name.c_str());
  dispatch(self.dtype(), name.c_str(), [&]<class T>() {
    const T sv = scalar_as<T>(s);
    with_binary_fn<T>(op, [&](auto fn) {
      map_elements<T, T>(self, {self}, [=](T v) { return fn(v, sv); });
    });
  });
}

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  if (alpha == 1.0) return binary(BinaryOp::Add, a, b);
  check_defined(a, "add");
  check_defined(b, "add");
  const IntList shape = broadcast_shapes(a.sizes(), b.sizes(), "add");
  const ScalarType dtype = promote_types(a.dtype(), b.dtype());
  LS_CHECK(is_floating_point(dtype) || (is_whole(alpha) && dtype != kBool),
           "add: alpha = ", alpha, " needs a floating point result but the inputs are ",
           a.dtype(), " and ", b.dtype(), "; use a whole alpha or convert the inputs to float");
  const Tensor x = to_dtype(a, dtype);
  const Tensor y = to_dtype(b, dtype);
  Tensor out = empty(shape, dtype);
  dispatch(dtype, "add", [&]<class T>() {
    const T al = scalar_as<T>(alpha);
    map_elements<T, T, T>(out, {x, y}, [=](T u, T v) { return static_cast<T>(u + al * v); });
  });
  return out;
}

Tensor compare(CompareOp op, const Tensor& a, const Tensor& b) {
  const char* name = compare_op_name(op);
  check_defined(a, name);
  check_defined(b, name);
  const IntList shape = broadcast_shapes(a.sizes(), b.sizes(), name);
  const ScalarType dtype = promote_types(a.dtype(), b.dtype());
  const Tensor x = to_dtype(a, dtype);
  const Tensor y = to_dtype(b, dtype);
  Tensor out = empty(shape, kBool);
  dispatch(dtype, name, [&]<class T>() {
    with_compare_fn<T>(op, [&](auto fn) { map_elements<bool, T, T>(out, {x, y}, fn); });
  });
  return out;
}

Tensor compare_scalar(CompareOp op, const Tensor& a, double s) {
  const char* name = compare_op_name(op);
  check_defined(a, name);
  Tensor out = empty(a.sizes(), kBool);
  dispatch(a.dtype(), name, [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) {
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
  check_defined(condition, "where");
  check_defined(a, "where");
  check_defined(b, "where");
  LS_CHECK(condition.dtype() == kBool, "where: condition must be a bool tensor but has dtype ",
           condition.dtype(), "; make one with a comparison such as x.gt(0)");
  const IntList ab = broadcast_shapes(a.sizes(), b.sizes(), "where");
  const IntList shape = broadcast_shapes(condition.sizes(), ab, "where");
  const ScalarType dtype = promote_types(a.dtype(), b.dtype());
  const Tensor x = to_dtype(a, dtype);
  const Tensor y = to_dtype(b, dtype);
  Tensor out = empty(shape, dtype);
  dispatch(dtype, "where", [&]<class T>() {
    map_elements<T, bool, T, T>(out, {condition, x, y}, [](bool c, T u, T v) { return c ? u : v; });
  });
  return out;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
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
