// autograd/functions/grad_ops.h — the ops the backward formulas of double-differentiable
// nodes are written in: one formula, two paths.
//
// Outside a backward with create_graph grad mode is off (the engine runs every
// formula under NoGradGuard), and each op here is the native kernel the formula
// always used: nothing is recorded and nothing costs more than before. In a
// backward with create_graph the engine turns grad mode on for the nodes that
// say supports_double_backward(), and each op here is the recording Tensor op of
// the same name, so the gradient it builds carries history and can be
// differentiated again (Note [Double backward] in autograd/double_backward.h).
// A formula that has a fused native kernel with no recording twin (relu_backward,
// linear_backward) branches on recording() itself.
//
// Read before: autograd/functions/functions.h, autograd/double_backward.h.
// Read next: autograd/functions/elementwise.cpp.
#pragma once

#include "core/grad_mode.h"
#include "core/native/native.h"
#include "core/tensor.h"

namespace lockstep::autograd::grad_ops {

// True while a formula's results must be recorded: inside a backward with
// create_graph, in a node that supports double backward.
inline bool recording() { return GradMode::is_enabled(); }

inline Tensor add(const Tensor& a, const Tensor& b) {
  return recording() ? a + b : native::add(a, b);
}
inline Tensor mul(const Tensor& a, const Tensor& b) {
  return recording() ? a * b : native::binary(native::BinaryOp::Mul, a, b);
}
inline Tensor div(const Tensor& a, const Tensor& b) {
  return recording() ? a / b : native::binary(native::BinaryOp::Div, a, b);
}
inline Tensor mul(const Tensor& a, double s) {
  return recording() ? a * s : native::binary_scalar(native::BinaryOp::Mul, a, s);
}
inline Tensor div(const Tensor& a, double s) {
  return recording() ? a / s : native::binary_scalar(native::BinaryOp::Div, a, s);
}
inline Tensor rsub(double s, const Tensor& a) {  // s - a
  return recording() ? s - a : native::scalar_binary(native::BinaryOp::Sub, s, a);
}
inline Tensor neg(const Tensor& a) {
  return recording() ? a.neg() : native::unary(native::UnaryOp::Neg, a);
}
inline Tensor pow(const Tensor& a, double exponent) {
  return recording() ? a.pow(exponent) : native::pow_scalar(a, exponent);
}
inline Tensor exp(const Tensor& a) {
  return recording() ? a.exp() : native::unary(native::UnaryOp::Exp, a);
}
inline Tensor sigmoid(const Tensor& a) {
  return recording() ? a.sigmoid() : native::unary(native::UnaryOp::Sigmoid, a);
}
inline Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  return recording() ? lockstep::where(condition, a, b) : native::where(condition, a, b);
}
inline Tensor to_dtype(const Tensor& a, ScalarType dtype) {
  return recording() ? a.to(dtype) : native::to_dtype(a, dtype);
}

// ---- shape ----
inline Tensor reshape(const Tensor& a, const IntList& sizes) {
  return recording() ? a.reshape(sizes) : native::reshape(a, sizes);
}
inline Tensor transpose(const Tensor& a, int64_t dim0, int64_t dim1) {
  return recording() ? a.transpose(dim0, dim1) : native::transpose(a, dim0, dim1);
}
inline Tensor permute(const Tensor& a, const IntList& dims) {
  return recording() ? a.permute(dims) : native::permute(a, dims);
}
inline Tensor unsqueeze(const Tensor& a, int64_t dim) {
  return recording() ? a.unsqueeze(dim) : native::unsqueeze(a, dim);
}
inline Tensor expand(const Tensor& a, const IntList& sizes) {
  return recording() ? a.expand(sizes) : native::expand(a, sizes);
}

// g summed down to `sizes` (Note [Gradient of a broadcast input] in functions.h):
// the leading dims g has beyond `sizes` and every dim where `sizes` is 1 but g is not.
inline Tensor sum_to(const Tensor& g, const IntList& sizes) {
  if (!recording()) return native::sum_to(g, sizes);
  if (g.sizes() == sizes) return g;
  const int64_t lead = g.dim() - static_cast<int64_t>(sizes.size());
  IntList dims;
  for (int64_t d = 0; d < lead; ++d) dims.push_back(d);
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 1 && g.size(lead + static_cast<int64_t>(i)) != 1) {
      dims.push_back(lead + static_cast<int64_t>(i));
    }
  }
  Tensor summed = dims.empty() ? g : g.sum(dims, /*keepdim=*/true);
  return summed.reshape(sizes);
}

// ---- products ----
inline Tensor mm(const Tensor& a, const Tensor& b) {
  return recording() ? lockstep::matmul(a, b) : native::mm(a, b);
}
inline Tensor matmul(const Tensor& a, const Tensor& b) {
  return recording() ? lockstep::matmul(a, b) : native::matmul(a, b);
}
inline Tensor bmm(const Tensor& a, const Tensor& b) {
  return recording() ? lockstep::bmm(a, b) : native::bmm(a, b);
}

}  // namespace lockstep::autograd::grad_ops
