// autograd/functions/unary.cpp — one-input math: neg, relu, gelu, exp, log, tanh,
// sigmoid, sqrt, rsqrt, abs, pow, sin, cos.
//
// With y = f(x) and g = dL/dy, each node returns dL/dx = g * f'(x), written with
// whichever of x ("self") or y ("result") makes f' cheapest:
//   NegBackward      y = -x          -g
//   ReluBackward     y = max(x, 0)   g where y > 0, else 0 (0 at the kink x = 0, like PyTorch)
//   GeluBackward     y = x Φ(x)      g * (Φ(x) + x φ(x))     (native::gelu_backward)
//   ExpBackward      y = e^x         g * y
//   LogBackward      y = ln x        g / x
//   TanhBackward     y = tanh x      g * (1 - y^2)
//   SigmoidBackward  y = σ(x)        g * y * (1 - y)
//   SqrtBackward     y = √x          g / (2 y)
//   RsqrtBackward    y = 1/√x        g * (-1/2) * y^3
//   AbsBackward      y = |x|         g * sign(x)   (0 at x = 0, like PyTorch)
//   PowBackward      y = x^p         g * p * x^(p-1)   (0 when p == 0)
//   SinBackward      y = sin x       g * cos x
//   CosBackward      y = cos x       -g * sin x
//
// All support double backward (their formulas use grad_ops.h; those that save y
// read it through saved_result; sign and relu's mask are constants). Gelu's
// recorded formula multiplies g by gelu_derivative(x) = Φ(x) + x φ(x), an op of
// its own whose derivative is φ(x) (2 - x^2) (GeluDerivativeBackward).
//
// Read before: autograd/functions/functions.h. Read next: autograd/functions/reduce.cpp.
#include "autograd/functions/functions.h"
#include "core/profiler.h"

namespace lockstep::autograd {
namespace {

using native::UnaryOp;

// The base of the nodes below that keep one tensor, x or y, for their formula.
struct UnaryBackward : BackwardNode {
  SavedVariable saved;
  void release_variables() override { saved.reset(); }
};

struct NegBackward final : DoubleBackwardNode {
  std::string name() const override { return "NegBackward"; }
  variable_list apply(variable_list&& grads) override { return {grad_ops::neg(grads[0])}; }
};

struct ReluBackward final : UnaryBackward {  // saved = result
  std::string name() const override { return "ReluBackward"; }
  bool supports_double_backward() const override { return true; }
  variable_list apply(variable_list&& grads) override {
    Tensor y = saved.unpack(name());
    if (!grad_ops::recording()) return {native::relu_backward(grads[0], y)};
    // g times a 0/1 mask: the mask is constant, so relu's second derivative is 0.
    Tensor mask = native::compare_scalar(native::CompareOp::Gt, y, 0.0);
    return {grads[0] * mask_to(mask, grads[0].dtype())};
  }
};

// Φ(x) + x φ(x) = d gelu(x) / dx, whose own derivative is φ(x) (2 - x^2) with
// φ(x) = exp(-x^2 / 2) / sqrt(2 pi); recorded under grad mode, so every order of
// gelu's derivative can be taken.
struct GeluDerivativeBackward final : UnaryBackward {  // saved = self
  std::string name() const override { return "GeluDerivativeBackward"; }
  bool supports_double_backward() const override { return true; }
  variable_list apply(variable_list&& grads) override {
    const Tensor x = saved.unpack(name());
    const Tensor x2 = grad_ops::mul(x, x);
    const Tensor phi = grad_ops::mul(grad_ops::exp(grad_ops::mul(x2, -0.5)), 0.3989422804014327);
    return {grad_ops::mul(grads[0], grad_ops::mul(phi, grad_ops::rsub(2.0, x2)))};
  }
};

// The value from the native gelu backward with g = 1.
Tensor gelu_derivative(const Tensor& x) {
  Tensor ones = native::empty(x.sizes(), x.dtype(), x.device());
  native::fill_(ones, 1.0);
  Tensor d = native::gelu_backward(ones, x);
  if (compute_requires_grad({x})) {
    auto node = std::make_shared<GeluDerivativeBackward>();
    node->saved = SavedVariable(x);
    record(node, {x}, {d});
  }
  return d;
}

struct GeluBackward final : UnaryBackward {  // saved = self
  std::string name() const override { return "GeluBackward"; }
  bool supports_double_backward() const override { return true; }
  variable_list apply(variable_list&& grads) override {
    const Tensor x = saved.unpack(name());
    if (!grad_ops::recording()) return {native::gelu_backward(grads[0], x)};
    return {grads[0] * gelu_derivative(x)};
  }
};

struct ExpBackward final : UnaryBackward {  // saved = result
  std::string name() const override { return "ExpBackward"; }
  bool supports_double_backward() const override { return true; }
  variable_list apply(variable_list&& grads) override {
    return {grad_ops::mul(grads[0], saved_result(saved, *this))};
  }
};

struct LogBackward final : UnaryBackward {  // saved = self
  std::string name() const override { return "LogBackward"; }
  bool supports_double_backward() const override { return true; }
  variable_list apply(variable_list&& grads) override {
    return {grad_ops::div(grads[0], saved.unpack(name()))};
  }
};

struct TanhBackward final : UnaryBackward {  // saved = result
  std::string name() const override { return "TanhBackward"; }
  bool supports_double_backward() const override { return true; }
  variable_list apply(variable_list&& grads) override {
    Tensor y = saved_result(saved, *this);
    return {grad_ops::mul(grads[0], grad_ops::rsub(1.0, grad_ops::mul(y, y)))};
  }
};

struct SigmoidBackward final : UnaryBackward {  // saved = result
  std::string name() const override { return "SigmoidBackward"; }
  bool supports_double_backward() const override { return true; }
  variable_list apply(variable_list&& grads) override {
    Tensor y = saved_result(saved, *this);
    return {grad_ops::mul(grads[0], grad_ops::mul(y, grad_ops::rsub(1.0, y)))};
  }
};

struct SqrtBackward final : UnaryBackward {  // saved = result
  std::string name() const override { return "SqrtBackward"; }
  bool supports_double_backward() const override { return true; }
  variable_list apply(variable_list&& grads) override {
    Tensor two_y = grad_ops::mul(saved_result(saved, *this), 2.0);
    return {grad_ops::div(grads[0], two_y)};
  }
};

struct RsqrtBackward final : UnaryBackward {  // saved = result
  std::string name() const override { return "RsqrtBackward"; }
  bool supports_double_backward() const override { return true; }
  variable_list apply(variable_list&& grads) override {
    Tensor y3 = grad_ops::pow(saved_result(saved, *this), 3.0);
    return {grad_ops::mul(grads[0], grad_ops::mul(y3, -0.5))};
  }
};

struct AbsBackward final : UnaryBackward {  // saved = self
  std::string name() const override { return "AbsBackward"; }
  bool supports_double_backward() const override { return true; }
  variable_list apply(variable_list&& grads) override {
    // sign(x) is a constant (taken from the data without history): |x|'' = 0 off 0.
    return {grad_ops::mul(grads[0], native::unary(UnaryOp::Sign, saved.unpack(name()).detach()))};
  }
};

struct PowBackward final : UnaryBackward {  // saved = self
  double exponent = 1.0;
  std::string name() const override { return "PowBackward"; }
  bool supports_double_backward() const override { return true; }
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];
    Tensor x = saved.unpack(name());
    if (exponent == 0.0) return {native::zeros(x.sizes(), g.dtype(), g.device())};
    Tensor dy_dx = grad_ops::mul(grad_ops::pow(x, exponent - 1.0), exponent);
    return {grad_ops::mul(g, dy_dx)};
  }
};

struct SinBackward final : UnaryBackward {  // saved = self: d sin(x) = cos(x)
  std::string name() const override { return "SinBackward"; }
  bool supports_double_backward() const override { return true; }
  variable_list apply(variable_list&& grads) override {
    Tensor x = saved.unpack(name());
    Tensor cos_x = grad_ops::recording() ? x.cos() : native::unary(UnaryOp::Cos, x);
    return {grad_ops::mul(grads[0], cos_x)};
  }
};

struct CosBackward final : UnaryBackward {  // saved = self: d cos(x) = -sin(x)
  std::string name() const override { return "CosBackward"; }
  bool supports_double_backward() const override { return true; }
  variable_list apply(variable_list&& grads) override {
    Tensor x = saved.unpack(name());
    Tensor sin_x = grad_ops::recording() ? x.sin() : native::unary(UnaryOp::Sin, x);
    return {grad_ops::mul(grads[0], grad_ops::neg(sin_x))};
  }
};

enum class Save { Self, Result };

// Runs native::unary(op, x) and records NodeT saving x or the result; `name`
// names the op's profiler scope (core/profiler.h).
template <class NodeT>
Tensor unary_op(const char* name, UnaryOp op, const Tensor& x, Save save) {
  profiler::Scope prof(name);
  Tensor y = native::unary(op, x);
  if (compute_requires_grad({x})) {
    auto node = std::make_shared<NodeT>();
    node->saved = SavedVariable(save == Save::Self ? x : y);
    record(node, {x}, {y});
  }
  return y;
}

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the ops that record these nodes
using native::UnaryOp;

Tensor Tensor::neg() const {
  profiler::Scope prof("neg");
  Tensor y = native::unary(UnaryOp::Neg, *this);
  if (compute_requires_grad({*this})) record(std::make_shared<NegBackward>(), {*this}, {y});
  return y;
}

Tensor Tensor::relu() const {
  return unary_op<ReluBackward>("relu", UnaryOp::Relu, *this, Save::Result);
}
Tensor Tensor::gelu() const {
  return unary_op<GeluBackward>("gelu", UnaryOp::Gelu, *this, Save::Self);
}
Tensor Tensor::exp() const {
  return unary_op<ExpBackward>("exp", UnaryOp::Exp, *this, Save::Result);
}
Tensor Tensor::log() const { return unary_op<LogBackward>("log", UnaryOp::Log, *this, Save::Self); }
Tensor Tensor::tanh() const {
  return unary_op<TanhBackward>("tanh", UnaryOp::Tanh, *this, Save::Result);
}
Tensor Tensor::sqrt() const {
  return unary_op<SqrtBackward>("sqrt", UnaryOp::Sqrt, *this, Save::Result);
}
Tensor Tensor::abs() const { return unary_op<AbsBackward>("abs", UnaryOp::Abs, *this, Save::Self); }

Tensor Tensor::sigmoid() const {
  return unary_op<SigmoidBackward>("sigmoid", UnaryOp::Sigmoid, *this, Save::Result);
}

Tensor Tensor::sin() const { return unary_op<SinBackward>("sin", UnaryOp::Sin, *this, Save::Self); }
Tensor Tensor::cos() const { return unary_op<CosBackward>("cos", UnaryOp::Cos, *this, Save::Self); }

Tensor Tensor::rsqrt() const {
  return unary_op<RsqrtBackward>("rsqrt", UnaryOp::Rsqrt, *this, Save::Result);
}

Tensor Tensor::pow(double exponent) const {
  profiler::Scope prof("pow");
  Tensor y = native::pow_scalar(*this, exponent);
  if (compute_requires_grad({*this})) {
    auto node = std::make_shared<PowBackward>();
    node->saved = SavedVariable(*this);
    node->exponent = exponent;
    record(node, {*this}, {y});
  }
  return y;
}

}  // namespace lockstep
