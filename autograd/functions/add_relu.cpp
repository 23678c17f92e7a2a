// autograd/functions/add_relu.cpp — add_relu(a, b) = relu(a + b) as one op, the
// end of every ResNet block (out + identity, then ReLU).
//
// AddReluBackward saves only the output y: y > 0 exactly where a + b > 0, so
// both inputs get relu_backward(g, y) = g where y > 0, else 0 (0 at the kink,
// like ReluBackward), computed by native::add_relu_backward. The sum a + b is never kept, and in the forward never
// written: see Note [Fused BatchNorm + ReLU] in autograd/functions/batch_norm.cpp
// for why fused ops beat an out-of-place ReLU. Inputs of different shapes or
// dtypes take the unfused path, (a + b).relu(), whose nodes handle broadcasting.
//
// Read before: autograd/functions/batch_norm.cpp, core/native/fused_relu.h.
// Read next: models/resnet.cpp.
#include "autograd/functions/functions.h"
#include "core/native/fused_relu.h"
#include "core/nn_ops.h"
#include "core/profiler.h"

namespace lockstep::autograd {
namespace {

struct AddReluBackward final : DoubleBackwardNode {
  SavedVariable output;
  std::string name() const override { return "AddReluBackward"; }

  variable_list apply(variable_list&& grads) override {
    if (grad_ops::recording()) {  // g times the constant mask out > 0, as ReluBackward's
      const Tensor mask = native::compare_scalar(native::CompareOp::Gt, output.unpack(name()), 0.0);
      Tensor g = grads[0] * mask_to(mask, grads[0].dtype());
      return {g, g};
    }
    Tensor g = native::add_relu_backward(grads[0], output.unpack(name()));
    return {g, g};  // the same tensor twice: see Note [Gradients returned by nodes]
  }

  void release_variables() override { output.reset(); }
};

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the op that records this node

Tensor add_relu(const Tensor& a, const Tensor& b) {
  lockstep::detail::check_defined(a, "add_relu");
  lockstep::detail::check_defined(b, "add_relu");
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return (a + b).relu();
  profiler::Scope prof("add_relu");
  Tensor out = native::add_relu(a, b);
  if (compute_requires_grad({a, b})) {
    auto node = std::make_shared<AddReluBackward>();
    node->output = SavedVariable(out);
    record(node, {a, b}, {out});
  }
  return out;
}

}  // namespace lockstep
