// core/cuda/unary.cu — elementwise math of one tensor on a CUDA device, pow,
// and the backward helpers of relu and gelu.
//
// Same rules as the CPU kernels (core/native/unary.cpp): neg, abs, relu and
// sign work on every computing dtype; the transcendental ops need float32 or
// float64. The math is CUDA's libdevice (expf, erff, tanh, ...), which is
// accurate to a few ulp, so results match the CPU within float tolerance, not
// bit for bit. GELU is the erf form, like the CPU and PyTorch's default.
// bfloat16 computes in float and rounds once (Note [16-bit elements computed in
// float] in cuda_loops.cuh).
// Read before: core/cuda/elementwise.cu, core/native/unary.cpp.
// Read next: core/cuda/reduce.cu.
#include <cmath>
#include <type_traits>

#include "core/cuda/cuda_loops.cuh"
#include "core/cuda/cuda_native.h"
#include "core/native/elementwise_rules.h"

namespace lockstep::cuda_native {

using namespace detail;

using native::rules::check_defined;

namespace {

bool is_integer_safe(UnaryOp op) {
  return op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu || op == UnaryOp::Sign;
}

// neg, abs, relu, sign for any computing dtype T (unsigned and bool have no negatives).
template <class T>
struct IntegerSafeFn {
  UnaryOp op;
  __device__ T operator()(T x) const {
    constexpr bool has_negatives = std::is_signed_v<T> || std::is_floating_point_v<T>;
    switch (op) {
      case UnaryOp::Neg: return static_cast<T>(-x);
      case UnaryOp::Abs:
        if constexpr (has_negatives) return x < T(0) ? static_cast<T>(-x) : x;
        return x;
      case UnaryOp::Relu:
        if constexpr (has_negatives) return x < T(0) ? T(0) : x;  // NaN stays NaN
        return x;
      case UnaryOp::Sign:
        if constexpr (std::is_floating_point_v<T>) {
          return x > T(0) ? T(1) : (x < T(0) ? T(-1) : x);
        } else if constexpr (has_negatives) {
          return static_cast<T>((x > T(0)) - (x < T(0)));
        } else {
          return static_cast<T>(x != T(0));
        }
      default: return x;
    }
  }
};

template <class T>
struct FloatingFn {
  UnaryOp op;
  __device__ T operator()(T x) const {
    const T inv_sqrt2 = static_cast<T>(0.70710678118654752440);
    switch (op) {
      case UnaryOp::Gelu: return x * T(0.5) * (T(1) + erf(x * inv_sqrt2));
      case UnaryOp::Exp: return exp(x);
      case UnaryOp::Log: return log(x);
      case UnaryOp::Tanh: return tanh(x);
      case UnaryOp::Sigmoid: return T(1) / (T(1) + exp(-x));
      case UnaryOp::Sqrt: return sqrt(x);
      case UnaryOp::Rsqrt: return T(1) / sqrt(x);
      case UnaryOp::Erf: return erf(x);
      case UnaryOp::Sin: return sin(x);
      case UnaryOp::Cos: return cos(x);
      default: return IntegerSafeFn<T>{op}(x);
    }
  }
};

template <class T>
struct PowFn {
  T e;
  int kind;  // 1: x, 2: x^2, 3: x^3, -1: 1/x, 5: sqrt, 0: pow
  __device__ T operator()(T x) const {
    switch (kind) {
      case 1: return x;
      case 2: return x * x;
      case 3: return x * x * x;
      case -1: return T(1) / x;
      case 5: return sqrt(x);
      default: return pow(x, e);
    }
  }
};

template <class T>
struct ReluBackwardFn {
  __device__ T operator()(T g, T v) const { return v > T(0) ? g : T(0); }  // 0 at the kink
};

template <class T>
struct GeluBackwardFn {
  __device__ T operator()(T g, T v) const {
    const T inv_sqrt2 = static_cast<T>(0.70710678118654752440);
    const T inv_sqrt2pi = static_cast<T>(0.39894228040143267794);
    const T cdf = T(0.5) * (T(1) + erf(v * inv_sqrt2));
    const T pdf = exp(T(-0.5) * v * v) * inv_sqrt2pi;
    return g * (cdf + v * pdf);
  }
};

Tensor backward_input(const Tensor& grad, const Tensor& input, const char* op) {
  check_defined(grad, op);
  check_defined(input, op);
  check_on_device(op, grad.device(), {&grad, &input});
  LS_CHECK(grad.sizes() == input.sizes(), op, ": grad has shape ", grad.shape_str(),
           " but input has shape ", input.shape_str(), "; they must match");
  return to_dtype(input, grad.dtype());
}

}  // namespace

Tensor unary(UnaryOp op, const Tensor& a) {
  const char* name = native::unary_op_name(op);
  check_defined(a, name);
  cuda::DeviceGuard guard(a.device());
  Tensor out = native::empty(a.sizes(), a.dtype(), a.device());
  if (is_integer_safe(op)) {
    LS_CHECK(!(op == UnaryOp::Neg && a.dtype() == kBool),
             "neg: negating a bool tensor is not supported; convert it with .to(ls::kInt64) first");
    dev_dispatch_compute(a.dtype(), name, [&]<class S, class C>() {
      map1<S, S>(out, a, Widened1<S, IntegerSafeFn<C>>{{op}}, name);
    });
  } else {
    dev_dispatch_floating_compute(a.dtype(), name, [&]<class S, class C>() {
      map1<S, S>(out, a, Widened1<S, FloatingFn<C>>{{op}}, name);
    });
  }
  return out;
}

Tensor pow_scalar(const Tensor& a, double exponent) {
  check_defined(a, "pow");
  cuda::DeviceGuard guard(a.device());
  Tensor out = native::empty(a.sizes(), a.dtype(), a.device());
  const int kind = exponent == 1.0 ? 1 : exponent == 2.0 ? 2 : exponent == 3.0 ? 3
                 : exponent == -1.0 ? -1 : exponent == 0.5 ? 5 : 0;
  dev_dispatch_floating_compute(a.dtype(), "pow", [&]<class S, class C>() {
    map1<S, S>(out, a, Widened1<S, PowFn<C>>{{static_cast<C>(exponent), kind}}, "pow");
  });
  return out;
}

Tensor relu_backward(const Tensor& grad, const Tensor& input) {
  const Tensor x = backward_input(grad, input, "relu_backward");
  cuda::DeviceGuard guard(grad.device());
  Tensor out = native::empty(grad.sizes(), grad.dtype(), grad.device());
  dev_dispatch_floating_compute(grad.dtype(), "relu_backward", [&]<class S, class C>() {
    map2<S, S, S>(out, grad, x, Widened2<S, ReluBackwardFn<C>>{{}}, "relu_backward");
  });
  return out;
}

Tensor gelu_backward(const Tensor& grad, const Tensor& input) {
  const Tensor x = backward_input(grad, input, "gelu_backward");
  cuda::DeviceGuard guard(grad.device());
  Tensor out = native::empty(grad.sizes(), grad.dtype(), grad.device());
  dev_dispatch_floating_compute(grad.dtype(), "gelu_backward", [&]<class S, class C>() {
    map2<S, S, S>(out, grad, x, Widened2<S, GeluBackwardFn<C>>{{}}, "gelu_backward");
  });
  return out;
}

}  // namespace lockstep::cuda_native
