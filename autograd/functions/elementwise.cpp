// autograd/functions/elementwise.cpp — + - * / with broadcasting, where, maximum, minimum.
//
// Binary ops broadcast like NumPy and promote dtypes, so every formula ends
// with reduce_to(): see Note [Gradient of a broadcast input] in functions.h.
// With c = op(a, b) and g = dL/dc:
//   AddBackward        c = a + b      da = g              db = g
//   SubBackward        c = a - b      da = g              db = -g
//   MulBackward        c = a * b      da = g * b          db = g * a
//   DivBackward        c = a / b      da = g / b          db = -g * a / b^2
//   MaximumBackward    c = max(a, b)  da = g where a > b, g/2 where a == b   (like PyTorch)
//   MinimumBackward    c = min(a, b)  da = g where a < b, g/2 where a == b
//   WhereBackward      c = cond ? a : b   da = g where cond   db = g where !cond
// With a scalar s (never differentiated):
//   AddScalarBackward  a + s, a - s   da = g
//   MulScalarBackward  a * s, s * a   da = g * s
//   DivScalarBackward  a / s          da = g / s
//   RsubScalarBackward s - a          da = -g
//   RdivScalarBackward s / a          da = -g * s / a^2
// Unary minus is neg(), in unary.cpp. Every node here writes its formula with
// grad_ops.h, so it supports double backward (maximum's and minimum's 0/1/half
// weights are constants: their second derivative is 0 away from ties).
//
// Read before: autograd/functions/functions.h. Read next: autograd/functions/unary.cpp.
#include "autograd/functions/functions.h"
#include "core/profiler.h"

namespace lockstep::autograd {
namespace {

using native::BinaryOp;
using native::CompareOp;

struct AddBackward final : DoubleBackwardNode {
  InputMeta self, other;
  std::string name() const override { return "AddBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];
    return {should_compute_output(0) ? reduce_to(g, self) : Tensor(),
            should_compute_output(1) ? reduce_to(g, other) : Tensor()};
  }
};

struct SubBackward final : DoubleBackwardNode {
  InputMeta self, other;
  std::string name() const override { return "SubBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];
    return {should_compute_output(0) ? reduce_to(g, self) : Tensor(),
            should_compute_output(1)
                ? reduce_to(grad_ops::neg(g), other)
                : Tensor()};
  }
};

struct MulBackward final : DoubleBackwardNode {
  InputMeta self_meta, other_meta;
  SavedVariable self, other;  // each saved only when the other factor's gradient needs it
  std::string name() const override { return "MulBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];
    Tensor da, db;
    if (should_compute_output(0)) {
      da = reduce_to(grad_ops::mul(g, other.unpack(name())), self_meta);
    }
    if (should_compute_output(1)) {
      db = reduce_to(grad_ops::mul(g, self.unpack(name())), other_meta);
    }
    return {da, db};
  }
  void release_variables() override {
    self.reset();
    other.reset();
  }
};

struct DivBackward final : DoubleBackwardNode {
  InputMeta self_meta, other_meta;
  SavedVariable self, other;  // self only when b requires grad
  std::string name() const override { return "DivBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];
    Tensor b = other.unpack(name());
    Tensor da, db;
    if (should_compute_output(0)) {
      da = reduce_to(grad_ops::div(g, b), self_meta);
    }
    if (should_compute_output(1)) {
      // -g * a / b^2
      Tensor ga = grad_ops::mul(g, self.unpack(name()));
      Tensor b2 = grad_ops::mul(b, b);
      db = reduce_to(grad_ops::neg(grad_ops::div(ga, b2)), other_meta);
    }
    return {da, db};
  }
  void release_variables() override {
    self.reset();
    other.reset();
  }
};

// maximum and minimum: the gradient goes to the input that won; on a tie it
// is split evenly, as PyTorch does. `self_wins` is Gt for maximum, Lt for minimum.
struct MaximumMinimumBackward final : DoubleBackwardNode {
  InputMeta self_meta, other_meta;
  SavedVariable self, other;
  CompareOp self_wins = CompareOp::Gt;
  std::string name() const override {
    return self_wins == CompareOp::Gt ? "MaximumBackward" : "MinimumBackward";
  }
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];
    Tensor a = self.unpack(name()), b = other.unpack(name());
    // weight of a: 1 where a wins, 1/2 on ties, 0 where b wins
    Tensor wins = mask_to(native::compare(self_wins, a, b), g.dtype());
    Tensor ties = mask_to(native::compare(CompareOp::Eq, a, b), g.dtype());
    // The weights are constants (a and b's data), so the second derivative is 0 off ties.
    Tensor ga = grad_ops::mul(g, native::add(wins, ties, 0.5));  // broadcast shape
    Tensor da, db;
    if (should_compute_output(0)) da = reduce_to(ga, self_meta);
    if (should_compute_output(1)) {
      db = reduce_to(grad_ops::recording() ? g - ga : native::add(g, ga, -1.0), other_meta);
    }
    return {da, db};
  }
  void release_variables() override {
    self.reset();
    other.reset();
  }
};

struct WhereBackward final : DoubleBackwardNode {
  InputMeta self_meta, other_meta;  // the `a` and `b` of where(cond, a, b)
  SavedVariable condition;
  std::string name() const override { return "WhereBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];
    Tensor cond = condition.unpack(name());
    Tensor zero = zero_scalar(g.dtype(), g.device());
    Tensor da, db;
    if (should_compute_output(0)) da = reduce_to(grad_ops::where(cond, g, zero), self_meta);
    if (should_compute_output(1)) db = reduce_to(grad_ops::where(cond, zero, g), other_meta);
    return {da, db};
  }
  void release_variables() override { condition.reset(); }
};

struct AddScalarBackward final : DoubleBackwardNode {
  InputMeta self;
  std::string name() const override { return "AddScalarBackward"; }
  variable_list apply(variable_list&& grads) override { return {reduce_to(grads[0], self)}; }
};

struct MulScalarBackward final : DoubleBackwardNode {
  InputMeta self;
  double scalar = 1.0;
  std::string name() const override { return "MulScalarBackward"; }
  variable_list apply(variable_list&& grads) override {
    return {reduce_to(grad_ops::mul(grads[0], scalar), self)};
  }
};

struct DivScalarBackward final : DoubleBackwardNode {
  InputMeta self;
  double scalar = 1.0;
  std::string name() const override { return "DivScalarBackward"; }
  variable_list apply(variable_list&& grads) override {
    return {reduce_to(grad_ops::div(grads[0], scalar), self)};
  }
};

struct RsubScalarBackward final : DoubleBackwardNode {
  InputMeta self;
  std::string name() const override { return "RsubScalarBackward"; }
  variable_list apply(variable_list&& grads) override {
    return {reduce_to(grad_ops::neg(grads[0]), self)};
  }
};

struct RdivScalarBackward final : DoubleBackwardNode {
  InputMeta self_meta;
  SavedVariable self;
  double scalar = 1.0;
  std::string name() const override { return "RdivScalarBackward"; }
  variable_list apply(variable_list&& grads) override {
    // d(s / a)/da = -s / a^2
    Tensor a = self.unpack(name());
    Tensor a2 = grad_ops::mul(a, a);
    Tensor g = grad_ops::div(grad_ops::mul(grads[0], -scalar), a2);
    return {reduce_to(g, self_meta)};
  }
  void release_variables() override { self.reset(); }
};

// Records a tensor-tensor op whose node needs only the inputs' metadata.
template <class NodeT>
Tensor record_binary(Tensor out, const Tensor& a, const Tensor& b) {
  if (compute_requires_grad({a, b})) {
    auto node = std::make_shared<NodeT>();
    node->self = InputMeta(a);
    node->other = InputMeta(b);
    record(node, {a, b}, {out});
  }
  return out;
}

// Records a tensor-scalar op whose node needs only the input's metadata.
template <class NodeT>
Tensor record_scalar(Tensor out, const Tensor& a) {
  if (compute_requires_grad({a})) {
    auto node = std::make_shared<NodeT>();
    node->self = InputMeta(a);
    record(node, {a}, {out});
  }
  return out;
}

Tensor mul_scalar(const Tensor& a, double s) {
  profiler::Scope prof("mul");
  Tensor out = native::binary_scalar(BinaryOp::Mul, a, s);
  if (compute_requires_grad({a})) {
    auto node = std::make_shared<MulScalarBackward>();
    node->self = InputMeta(a);
    node->scalar = s;
    record(node, {a}, {out});
  }
  return out;
}

Tensor maximum_minimum(CompareOp self_wins, BinaryOp op, const Tensor& a, const Tensor& b) {
  profiler::Scope prof(self_wins == CompareOp::Gt ? "maximum" : "minimum");
  Tensor out = native::binary(op, a, b);
  if (compute_requires_grad({a, b})) {
    auto node = std::make_shared<MaximumMinimumBackward>();
    node->self_meta = InputMeta(a);
    node->other_meta = InputMeta(b);
    node->self = SavedVariable(a);
    node->other = SavedVariable(b);
    node->self_wins = self_wins;
    record(node, {a, b}, {out});
  }
  return out;
}

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the ops that record these nodes
using native::BinaryOp;

// ---- tensor (op) tensor ----

Tensor operator+(const Tensor& a, const Tensor& b) {
  profiler::Scope prof("add");
  return record_binary<AddBackward>(native::binary(BinaryOp::Add, a, b), a, b);
}

Tensor operator-(const Tensor& a, const Tensor& b) {
  profiler::Scope prof("sub");
  return record_binary<SubBackward>(native::binary(BinaryOp::Sub, a, b), a, b);
}

Tensor operator*(const Tensor& a, const Tensor& b) {
  profiler::Scope prof("mul");
  Tensor out = native::binary(BinaryOp::Mul, a, b);
  if (compute_requires_grad({a, b})) {
    auto node = std::make_shared<MulBackward>();
    node->self_meta = InputMeta(a);
    node->other_meta = InputMeta(b);
    if (b.requires_grad()) node->self = SavedVariable(a);
    if (a.requires_grad()) node->other = SavedVariable(b);
    record(node, {a, b}, {out});
  }
  return out;
}

Tensor operator/(const Tensor& a, const Tensor& b) {
  profiler::Scope prof("div");
  Tensor out = native::binary(BinaryOp::Div, a, b);
  if (compute_requires_grad({a, b})) {
    auto node = std::make_shared<DivBackward>();
    node->self_meta = InputMeta(a);
    node->other_meta = InputMeta(b);
    if (b.requires_grad()) node->self = SavedVariable(a);
    node->other = SavedVariable(b);
    record(node, {a, b}, {out});
  }
  return out;
}

// ---- tensor (op) scalar ----
// See Note [Scalar type promotion] in core/tensor.h. The scalar_* functions take
// the scalar's value as it is; the operators on double are the floating
// scalar's: an integer or bool tensor computes in float32, the default float
// dtype, whatever the value (arange(4) * 10.0 is float32, as in PyTorch), while
// detail::integer_scalar_op keeps an integer tensor's dtype (bool -> int64).

namespace {

Tensor as_float_operand(const Tensor& a) {
  return a.defined() && !a.is_floating_point() ? a.to(kFloat32) : a;
}

Tensor scalar_add(const Tensor& a, double b) {
  profiler::Scope prof("add");
  return record_scalar<AddScalarBackward>(native::binary_scalar(BinaryOp::Add, a, b), a);
}

Tensor scalar_sub(const Tensor& a, double b) {
  profiler::Scope prof("sub");
  return record_scalar<AddScalarBackward>(native::binary_scalar(BinaryOp::Sub, a, b), a);
}

Tensor scalar_div(const Tensor& a, double b) {
  profiler::Scope prof("div");
  Tensor out = native::binary_scalar(BinaryOp::Div, a, b);
  if (compute_requires_grad({a})) {
    auto node = std::make_shared<DivScalarBackward>();
    node->self = InputMeta(a);
    node->scalar = b;
    record(node, {a}, {out});
  }
  return out;
}

Tensor scalar_rsub(double a, const Tensor& b) {  // a - b
  profiler::Scope prof("rsub");
  return record_scalar<RsubScalarBackward>(native::scalar_binary(BinaryOp::Sub, a, b), b);
}

Tensor scalar_rdiv(double a, const Tensor& b) {  // a / b
  profiler::Scope prof("div");
  Tensor out = native::scalar_binary(BinaryOp::Div, a, b);
  if (compute_requires_grad({b})) {
    auto node = std::make_shared<RdivScalarBackward>();
    node->self_meta = InputMeta(b);
    node->self = SavedVariable(b);
    node->scalar = a;
    record(node, {b}, {out});
  }
  return out;
}

}  // namespace

Tensor operator+(const Tensor& a, double b) { return scalar_add(as_float_operand(a), b); }
Tensor operator-(const Tensor& a, double b) { return scalar_sub(as_float_operand(a), b); }
Tensor operator*(const Tensor& a, double b) { return mul_scalar(as_float_operand(a), b); }
Tensor operator/(const Tensor& a, double b) { return scalar_div(as_float_operand(a), b); }
Tensor operator+(double a, const Tensor& b) { return scalar_add(as_float_operand(b), a); }
Tensor operator-(double a, const Tensor& b) { return scalar_rsub(a, as_float_operand(b)); }
Tensor operator*(double a, const Tensor& b) { return mul_scalar(as_float_operand(b), a); }
Tensor operator/(double a, const Tensor& b) { return scalar_rdiv(a, as_float_operand(b)); }

Tensor lockstep::detail::integer_scalar_op(lockstep::detail::ScalarOp op, const Tensor& a, int64_t s) {
  // A whole double: the kernels keep an integer tensor's dtype for it, and
  // int64 values beyond 2^53 round (PyTorch keeps them exact; rare enough here).
  const double v = static_cast<double>(s);
  switch (op) {
    case lockstep::detail::ScalarOp::Add: return scalar_add(a, v);
    case lockstep::detail::ScalarOp::Sub: return scalar_sub(a, v);
    case lockstep::detail::ScalarOp::Mul: return mul_scalar(a, v);
    case lockstep::detail::ScalarOp::Div: return scalar_div(a, v);  // true division: integers give float32
    case lockstep::detail::ScalarOp::RSub: return scalar_rsub(v, a);
    case lockstep::detail::ScalarOp::RDiv: return scalar_rdiv(v, a);
  }
  throw Error("integer_scalar_op: unknown op");
}

Tensor operator-(const Tensor& a) { return a.neg(); }

// ---- where, maximum, minimum ----

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  profiler::Scope prof("where");
  Tensor out = native::where(condition, a, b);
  if (compute_requires_grad({a, b})) {
    auto node = std::make_shared<WhereBackward>();
    node->self_meta = InputMeta(a);
    node->other_meta = InputMeta(b);
    node->condition = SavedVariable(condition);
    record(node, {a, b}, {out});
  }
  return out;
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  return maximum_minimum(native::CompareOp::Gt, BinaryOp::Maximum, a, b);
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  return maximum_minimum(native::CompareOp::Lt, BinaryOp::Minimum, a, b);
}

}  // namespace lockstep
