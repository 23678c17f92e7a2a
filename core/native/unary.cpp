// core/native/unary.cpp — elementwise math of one tensor, and the backward
// helpers of relu and gelu.
//
// neg, abs, relu and sign work on every computing dtype; the transcendental
// ops (gelu, exp, log, tanh, sigmoid, sqrt, rsqrt, erf, sin, cos) and pow need
// float32/float64 and say so otherwise. Each op is one element function run
// through map_elements (core/native/elementwise_loop.h); the result is a new
// contiguous tensor of the input's shape and dtype.
//
// exp, sigmoid, gelu and erf use the vectorisable exp/erf of elementwise_loop.h
// (see Note [Vectorisable exp and erf]).
//
// GELU is the exact (erf) form, PyTorch's default (core/native/gelu_math.h).
//
// § Note [bfloat16 ReLU on bits]
// relu and relu_backward of contiguous bf16 tensors work on the stored 16-bit
// patterns, 32 to a vector, with no widening: relu(x) is x or +0 (x < 0: sign
// set, magnitude non-zero, not NaN), relu_backward(g, x) is g or +0 (x > 0: sign
// clear, magnitude non-zero, not NaN). A NaN result is quieted (bit 6 set), as
// rounding the float32 result would (BFloat16::round_bits), so both equal the
// float32 op on the widened inputs, rounded once, bit for bit (tested in
// tests/core/test_bf16_kernels.cpp). The gain on the SmallCNN's ReLUs:
// docs/results/kernel_choices.md.
//
// Read before: core/native/elementwise.cpp. Read next: core/native/reduce.cpp.
#include <cmath>
#include <cstdint>
#include <numbers>
#include <type_traits>

#include "core/native/elementwise_loop.h"
#include "core/native/gelu_math.h"
#include "core/native/cuda_dispatch.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/native/elementwise_rules.h"
#include "core/parallel.h"

namespace lockstep::native {

using detail::erf_simd;
using detail::exp_simd;
using detail::map_elements;

using rules::check_defined;

namespace {

// Calls body(fn) with fn the element function of a sign-aware op (neg, abs, relu,
// sign) for any computing dtype T. Unsigned types and bool have no negatives.
template <class T, class Body>
void with_integer_safe_fn(UnaryOp op, Body&& body) {
  constexpr bool has_negatives = std::is_signed_v<T> || is_floating_v<T>;
  switch (op) {
    case UnaryOp::Neg: return body([](T x) { return static_cast<T>(-x); });
    case UnaryOp::Abs:
      if constexpr (has_negatives) return body([](T x) { return x < T(0) ? static_cast<T>(-x) : x; });
      return body([](T x) { return x; });
    case UnaryOp::Relu:
      // x < 0 ? 0 : x keeps NaN as NaN, like PyTorch.
      if constexpr (has_negatives) return body([](T x) { return x < T(0) ? T(0) : x; });
      return body([](T x) { return x; });
    case UnaryOp::Sign:
      // 1, -1 or 0; for floats 0 keeps its sign bit and NaN stays NaN.
      if constexpr (is_floating_v<T>) {
        return body([](T x) { return x > T(0) ? T(1) : (x < T(0) ? T(-1) : x); });
      } else if constexpr (has_negatives) {
        return body([](T x) { return static_cast<T>((x > T(0)) - (x < T(0))); });
      } else {
        return body([](T x) { return static_cast<T>(x != T(0)); });
      }
    default: break;
  }
  throw Error(lockstep::detail::str(unary_op_name(op), ": not an integer-safe op"));
}

// Calls body(fn) with fn the element function of a floating-point op, T float or double.
template <class T, class Body>
void with_floating_fn(UnaryOp op, Body&& body) {
  switch (op) {
    case UnaryOp::Gelu:
      return body([](T x) { return gelu_value(x); });
    case UnaryOp::Exp: return body([](T x) { return exp_simd(x); });
    case UnaryOp::Log: return body([](T x) { return std::log(x); });
    case UnaryOp::Tanh: return body([](T x) { return std::tanh(x); });
    // 1 / (1 + e^-x): for very negative x, e^-x = inf and the result is 0, as it should be.
    case UnaryOp::Sigmoid: return body([](T x) { return T(1) / (T(1) + exp_simd(-x)); });
    case UnaryOp::Sqrt: return body([](T x) { return std::sqrt(x); });
    case UnaryOp::Rsqrt: return body([](T x) { return T(1) / std::sqrt(x); });
    case UnaryOp::Erf: return body([](T x) { return erf_simd(x); });
    case UnaryOp::Sin: return body([](T x) { return std::sin(x); });
    case UnaryOp::Cos: return body([](T x) { return std::cos(x); });
    default: return with_integer_safe_fn<T>(op, body);
  }
}

bool is_integer_safe(UnaryOp op) {
  return op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu || op == UnaryOp::Sign;
}

// The shared checks of relu_backward and gelu_backward; returns input in grad's dtype.
Tensor backward_input(const Tensor& grad, const Tensor& input, const char* op) {
  check_defined(grad, op);
  check_defined(input, op);
  LS_CHECK(grad.sizes() == input.sizes(), op, ": grad has shape ", grad.shape_str(),
           " but input has shape ", input.shape_str(), "; they must match");
  return to_dtype(input, grad.dtype());
}

// The pieces of a bf16 bit pattern (Note [bfloat16 ReLU on bits]), as integer
// operations rather than selects: GCC 12 keeps selects on 16-bit lanes scalar
// without AVX-512, and vectorises these.
// b with its quiet bit set when it is a NaN.
inline uint16_t bf16_bits_quieted(uint16_t b) {
  return static_cast<uint16_t>(b | (((b & 0x7fffu) > 0x7f80u) << 6));
}
// All ones when `keep`, else 0.
inline uint16_t bits_mask(bool keep) { return static_cast<uint16_t>(0u - keep); }

Tensor relu_bf16_bits(const Tensor& a) {  // a dense (memory_format.h): a flat loop
  Tensor out = result_like(a.sizes(), kBFloat16, {&a});
  const auto* x = reinterpret_cast<const uint16_t*>(a.data_ptr<BFloat16>());
  auto* y = reinterpret_cast<uint16_t*>(out.data_ptr<BFloat16>());
  parallel_for(0, a.numel(), detail::kGrain, [x, y](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      // x < 0: sign set, magnitude 1 .. 0x7f80 (non-zero, not NaN), one unsigned compare.
      const bool negative = static_cast<uint16_t>(x[i] - 0x8001u) < 0x7f80u;
      y[i] = bf16_bits_quieted(x[i]) & bits_mask(!negative);
    }
  });
  return out;
}

Tensor relu_backward_bf16_bits(const Tensor& grad, const Tensor& input) {  // one dense layout
  Tensor out = result_like(grad.sizes(), kBFloat16, {&grad});
  const auto* g = reinterpret_cast<const uint16_t*>(grad.data_ptr<BFloat16>());
  const auto* x = reinterpret_cast<const uint16_t*>(input.data_ptr<BFloat16>());
  auto* y = reinterpret_cast<uint16_t*>(out.data_ptr<BFloat16>());
  // The pointers are captured by value: captured by reference, GCC reloads them
  // after every 16-bit store (they might alias) and the loop stays scalar.
  parallel_for(0, grad.numel(), detail::kGrain, [g, x, y](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      // x > 0: sign clear, magnitude 1 .. 0x7f80, one unsigned compare.
      const bool positive = static_cast<uint16_t>(x[i] - 1u) < 0x7f80u;
      y[i] = bf16_bits_quieted(g[i]) & bits_mask(positive);
    }
  });
  return out;
}

}  // namespace

const char* unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "neg";
    case UnaryOp::Abs: return "abs";
    case UnaryOp::Relu: return "relu";
    case UnaryOp::Gelu: return "gelu";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Rsqrt: return "rsqrt";
    case UnaryOp::Sign: return "sign";
    case UnaryOp::Erf: return "erf";
    case UnaryOp::Sin: return "sin";
    case UnaryOp::Cos: return "cos";
  }
  return "unary";
}

Tensor unary(UnaryOp op, const Tensor& a) {
  LS_DISPATCH_CUDA(a, unary(op, a));
  const char* name = unary_op_name(op);
  check_defined(a, name);
  if (op == UnaryOp::Relu && a.dtype() == kBFloat16 && is_dense(a)) {
    return relu_bf16_bits(a);  // Note [bfloat16 ReLU on bits]
  }
  Tensor out = result_like(a.sizes(), a.dtype(), {&a});
  if (is_integer_safe(op)) {
    LS_CHECK(!(op == UnaryOp::Neg && a.dtype() == kBool),
             "neg: negating a bool tensor is not supported; convert it with .to(ls::kInt64) first");
    dispatch_with_bf16(a.dtype(), name, [&]<class T>() {
      with_integer_safe_fn<T>(op, [&](auto fn) { map_elements<T, T>(out, {a}, fn); });
    });
  } else {  // S stored, C computed in (Note [bfloat16 elementwise])
    dispatch_floating_bf16(a.dtype(), name, [&]<class S, class C>() {
      with_floating_fn<C>(op, [&](auto fn) { map_elements<S, S>(out, {a}, fn); });
    });
  }
  return out;
}

Tensor pow_scalar(const Tensor& a, double exponent) {
  LS_DISPATCH_CUDA(a, pow_scalar(a, exponent));
  check_defined(a, "pow");
  Tensor out = empty(a.sizes(), a.dtype());
  dispatch_floating(a.dtype(), "pow", [&]<class T>() {
    // Exponents that have an exact cheaper form (and vectorise) skip std::pow.
    const T e = static_cast<T>(exponent);
    auto run = [&](auto fn) { map_elements<T, T>(out, {a}, fn); };
    if (exponent == 1.0) {
      run([](T x) { return x; });
    } else if (exponent == 2.0) {
      run([](T x) { return x * x; });
    } else if (exponent == 3.0) {
      run([](T x) { return x * x * x; });
    } else if (exponent == -1.0) {
      run([](T x) { return T(1) / x; });
    } else if (exponent == 0.5) {
      run([](T x) { return std::sqrt(x); });
    } else {
      run([=](T x) { return std::pow(x, e); });
    }
  });
  return out;
}

Tensor relu_backward(const Tensor& grad, const Tensor& input) {
  LS_DISPATCH_CUDA(grad, relu_backward(grad, input));
  LS_DISPATCH_CUDA(input, relu_backward(grad, input));
  const Tensor x = backward_input(grad, input, "relu_backward");
  if (grad.dtype() == kBFloat16 && same_dense_layout(grad, x)) {
    return relu_backward_bf16_bits(grad, x);  // Note [bfloat16 ReLU on bits]
  }
  Tensor out = result_like(grad.sizes(), grad.dtype(), {&grad, &x});
  dispatch_floating_bf16(grad.dtype(), "relu_backward", [&]<class S, class T>() {
    // The kink at x = 0 takes gradient 0, like PyTorch (threshold_backward).
    map_elements<S, S, S>(out, {grad, x}, [](T g, T v) { return v > T(0) ? g : T(0); });
  });
  return out;
}

Tensor gelu_backward(const Tensor& grad, const Tensor& input) {
  LS_DISPATCH_CUDA(grad, gelu_backward(grad, input));
  LS_DISPATCH_CUDA(input, gelu_backward(grad, input));
  const Tensor x = backward_input(grad, input, "gelu_backward");
  Tensor out = empty(grad.sizes(), grad.dtype());
  dispatch_floating_bf16(grad.dtype(), "gelu_backward", [&]<class S, class T>() {
    map_elements<S, S, S>(out, {grad, x}, [](T g, T v) { return gelu_grad(g, v); });
  });
  return out;
}

}  // namespace lockstep::native
