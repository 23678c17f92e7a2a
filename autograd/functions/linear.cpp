// autograd/functions/linear.cpp — ls::linear, the fused fully connected op.
//
// linear(x, W, b) = x W^T + b could be written as matmul(x, W.t()) + b, which
// records three nodes (TransposeBackward, MatmulBackward, AddBackward) and whose
// backward would sum the broadcast bias gradient separately. One LinearBackward
// node instead hands the whole job to native::linear_backward (see the formulas
// in core/native/linear.cpp): dX = G W, dW = G^T X, db = column sums of G, each
// one GEMM or one reduction, and each skipped when its input needs no gradient.
// x is saved only when W needs a gradient, W only when x does.
//
// Read before: autograd/functions/functions.h, core/native/linear.cpp.
// Read next: autograd/functions/layer_norm.cpp.
#include "autograd/functions/autocast_ops.h"
#include "autograd/functions/functions.h"
#include "core/native/nn_kernels_transformer.h"
#include "core/nn_ops.h"
#include "core/profiler.h"

namespace lockstep::autograd {
namespace {

struct LinearBackward final : BackwardNode {
  SavedVariable input, weight;  // each saved only when the other's gradient needs it
  ScalarType dtype = kFloat32;  // of input, weight and bias (linear requires them equal)
  std::string name() const override { return "LinearBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor g = native::to_dtype(grads[0], dtype);  // (*, out)
    auto [dx, dw, db] = native::linear_backward(g, input.unpack(name()), weight.unpack(name()),
                                                should_compute_output(0), should_compute_output(1),
                                                should_compute_output(2));
    return {dx, dw, db};
  }
  void release_variables() override {
    input.reset();
    weight.reset();
  }
};

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the op that records this node

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  if (autocast_applies({&input, &weight, &bias})) return linear_autocast(input, weight, bias);
  profiler::Scope prof("linear");
  Tensor out = native::linear_forward(input, weight, bias);  // (*, out)
  if (compute_requires_grad({input, weight, bias})) {
    auto node = std::make_shared<LinearBackward>();
    node->dtype = out.dtype();
    if (weight.requires_grad()) node->input = SavedVariable(input);
    if (input.requires_grad()) node->weight = SavedVariable(weight);
    record(node, {input, weight, bias}, {out});
  }
  return out;
}

}  // namespace lockstep
