// core/native/gelu_math.h — GELU and its derivative for one element, the exact
// (erf) form, PyTorch's default:
//   gelu(x)  = x * Phi(x),            Phi(x) = 0.5 * (1 + erf(x / sqrt(2)))
//   gelu'(x) = Phi(x) + x * phi(x),   phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
// One definition for Tensor::gelu and gelu_backward (core/native/unary.cpp) and the
// fused kernels that run them inside another pass (core/native/fused_dropout.cpp),
// so a fused path computes the same bits as the op it replaces. T is float or
// double; float uses the vectorisable erf/exp (Note [Vectorisable exp and erf]).
//
// Read before: core/native/elementwise_loop.h. Read next: core/native/unary.cpp.
#pragma once

#include <numbers>

#include "core/native/elementwise_loop.h"

namespace lockstep::native {

template <class T>
[[gnu::always_inline]] inline T gelu_value(T x) {
  constexpr T kInvSqrt2 = static_cast<T>(std::numbers::sqrt2 / 2);
  return x * T(0.5) * (T(1) + detail::erf_simd(x * kInvSqrt2));
}

// g * gelu'(v): the gradient of gelu at v times the incoming gradient g.
template <class T>
[[gnu::always_inline]] inline T gelu_grad(T g, T v) {
  constexpr T kInvSqrt2 = static_cast<T>(std::numbers::sqrt2 / 2);
  constexpr T kInvSqrt2Pi = static_cast<T>(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
  const T cdf = T(0.5) * (T(1) + detail::erf_simd(v * kInvSqrt2));
  const T pdf = detail::exp_simd(T(-0.5) * v * v) * kInvSqrt2Pi;
  return g * (cdf + v * pdf);
}

}  // namespace lockstep::native
