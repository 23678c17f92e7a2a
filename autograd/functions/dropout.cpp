// autograd/functions/dropout.cpp — ls::dropout.
//
// In training the forward kernel draws a bool mask (true = kept) and returns it;
// DropoutBackward keeps the mask, and its backward multiplies by the same
// mask / (1 - p): an element that was dropped passes no gradient, a kept one
// passes its gradient scaled like its value was. Outside training, or with
// p == 0, dropout is the identity and returns its input itself: no mask, no
// random draws, no node.
//
// dropout_to_bf16 is the same op writing its result in bf16 (Note [dropout writing the
// bf16 copy] in autograd/functions/autocast_ops.h); DropoutBackward widens the bf16
// gradient it then receives, as ToCopyBackward would have. dropout_add is x + dropout(y)
// as one op (Note [dropout + residual add in one pass]). DropoutBackward supports
// double backward (its mask is a constant); DropoutAddBackward, bf16 only, does not.
//
// Read before: autograd/functions/functions.h, core/native/dropout.cpp.
// Read next: autograd/functions/loss.cpp.
#include "autograd/functions/autocast_ops.h"
#include "autograd/functions/functions.h"
#include "core/native/nn_kernels_transformer.h"
#include "core/autocast.h"
#include "core/env_flag.h"
#include "core/nn_ops.h"
#include "core/profiler.h"

namespace lockstep::autograd {
namespace {

struct DropoutBackward final : DoubleBackwardNode {
  SavedVariable mask;  // bool, the input's shape
  double p = 0.0;
  ScalarType dtype = kFloat32;  // of the input
  std::string name() const override { return "DropoutBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor g = grad_ops::to_dtype(grads[0], dtype);
    if (!grad_ops::recording()) return {native::dropout_backward(g, mask.unpack(name()), p)};
    // With create_graph: g times the constant mask / (1 - p).
    const Tensor scale = native::binary_scalar(native::BinaryOp::Mul, mask_to(mask.unpack(name()), dtype),
                                               1.0 / (1.0 - p));
    return {g * scale};
  }
  void release_variables() override { mask.reset(); }
};

// h = x + dropout(y): Note [dropout + residual add in one pass].
struct DropoutAddBackward final : BackwardNode {
  SavedVariable mask;  // bool, y's shape
  double p = 0.0;
  std::string name() const override { return "DropoutAddBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor g = native::to_dtype(grads[0], kFloat32);  // dL/dh
    Tensor gy;  // dL/dy, bf16
    if (should_compute_output(1)) gy = native::dropout_add_backward(g, mask.unpack(name()), p);
    return {should_compute_output(0) ? g : Tensor(), gy};
  }
  void release_variables() override { mask.reset(); }
};

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the op that records this node

namespace autograd {

Tensor dropout_to_bf16(const Tensor& input, double p, bool training) {
  if (!training || p == 0.0 || input.dtype() != kFloat32 || !input.device().is_cpu()) {
    return lockstep::dropout(input, p, training);  // the identity, or not the fused case: as before
  }
  profiler::Scope prof("dropout");
  LS_CHECK(p >= 0.0 && p <= 1.0, "dropout: dropout probability has to be between 0 and 1, but got ",
           p);
  auto [out, mask] = native::dropout_forward_to(input, p, kBFloat16);
  if (compute_requires_grad({input})) {
    auto node = std::make_shared<DropoutBackward>();  // widens the bf16 gradient first
    node->mask = SavedVariable(mask);
    node->p = p;
    node->dtype = input.dtype();
    record(node, {input}, {out});
  }
  return out;
}

bool fuses_dropout_add(const Tensor& x, const Tensor& y, double p, bool training) {
  static const bool on = env_flag("LOCKSTEP_BF16_DROPOUT_ADD", true);
  return on && training && p > 0.0 && p <= 1.0 && is_autocast_enabled() && x.defined() &&
         y.defined() && x.dtype() == kFloat32 && y.dtype() == kBFloat16 && x.device().is_cpu() &&
         y.device().is_cpu() && x.sizes() == y.sizes();
}

Tensor dropout_add(const Tensor& x, const Tensor& y, double p) {
  profiler::Scope prof("dropout_add");
  auto [h, mask] = native::dropout_add_forward(x, y, p);
  if (compute_requires_grad({x, y})) {
    auto node = std::make_shared<DropoutAddBackward>();
    node->mask = SavedVariable(mask);
    node->p = p;
    record(node, {x, y}, {h});
  }
  return h;
}

}  // namespace autograd

Tensor dropout(const Tensor& input, double p, bool training) {
  profiler::Scope prof("dropout");
  LS_CHECK(p >= 0.0 && p <= 1.0, "dropout: dropout probability has to be between 0 and 1, but got ",
           p);
  if (!training || p == 0.0) return input;
  auto [out, mask] = native::dropout_forward(input, p);
  if (compute_requires_grad({input})) {
    auto node = std::make_shared<DropoutBackward>();
    node->mask = SavedVariable(mask);
    node->p = p;
    node->dtype = input.dtype();
    record(node, {input}, {out});
  }
  return out;
}

}  // namespace lockstep
