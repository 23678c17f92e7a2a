// autograd/functions/linear.cpp — ls::linear, the fused fully connected op.
//
// linear(x, W, b) = x W^T + b could be written as matmul(x, W.t()) + b, which
// records three nodes (TransposeBackward, MatmulBackward, AddBackward) and whose
// backward would sum the broadcast bias gradient separately. One LinearBackward
// node instead hands the whole job to native::linear_backward (see the formulas
// in core/native/linear.cpp): dX = G W, dW = G^T X, db = column sums of G, each
// one GEMM or one reduction, and each skipped when its input needs no gradient.
// x is saved only when W needs a gradient, W only when x does. In a backward
// with create_graph the same formulas run as recording ops (Note [Double backward]).
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

struct LinearBackward final : DoubleBackwardNode {
  SavedVariable input, weight;  // each saved only when the other's gradient needs it
  ScalarType dtype = kFloat32;  // of input, weight and bias (linear requires them equal)
  std::string name() const override { return "LinearBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor g = grad_ops::to_dtype(grads[0], dtype);  // (*, out)
    if (grad_ops::recording()) return recorded_formula(g);
    auto [dx, dw, db] = native::linear_backward(g, input.unpack(name()), weight.unpack(name()),
                                                should_compute_output(0), should_compute_output(1),
                                                should_compute_output(2));
    return {dx, dw, db};
  }
  // The same formulas with recording ops, for a backward with create_graph
  // (Note [Double backward]): dX = G W, dW = G^T X, db = column sums of G.
  variable_list recorded_formula(const Tensor& g) {
    Tensor g_rows = g.reshape({-1, g.size(-1)});  // (N, out)
    Tensor dx, dw, db;
    if (should_compute_output(0)) dx = matmul(g, weight.unpack(name()));  // (*, in)
    if (should_compute_output(1)) {
      Tensor x = input.unpack(name());
      dw = matmul(g_rows.t(), x.reshape({-1, x.size(-1)}));  // (out, in)
    }
    if (should_compute_output(2)) db = g_rows.sum({0});  // (out)
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
