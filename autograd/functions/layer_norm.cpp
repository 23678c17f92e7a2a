// autograd/functions/layer_norm.cpp — ls::layer_norm over the trailing dims.
//
// The forward kernel returns the per-row mean and rstd besides the output;
// LayerNormBackward saves them with the input (and weight, which grad_input
// needs), so backward does not recompute the statistics. Its three gradients
// (input, weight, bias) come from one native::layer_norm_backward call; the
// formulas are in core/native/layer_norm.cpp. In a backward with create_graph
// the node records layer_norm_backward_recorded (autograd/functions/norm_recorded.h)
// instead.
//
// Read before: autograd/functions/functions.h, core/native/layer_norm.cpp.
// Read next: autograd/functions/embedding.cpp.
#include "autograd/functions/autocast_ops.h"
#include "autograd/functions/functions.h"
#include "autograd/functions/norm_recorded.h"
#include "core/native/nn_kernels_transformer.h"
#include "core/nn_ops.h"
#include "core/profiler.h"

namespace lockstep::autograd {
namespace {

struct LayerNormBackward final : DoubleBackwardNode {
  SavedVariable input, weight, mean, rstd;  // mean, rstd: (M), one per normalised row
  IntList normalized_shape;
  double eps = 1e-5;  // to recompute mean and rstd with history (double backward)
  std::string name() const override { return "LayerNormBackward"; }
  variable_list apply(variable_list&& grads) override {
    if (grad_ops::recording()) {
      return layer_norm_backward_recorded(
          grads[0], input.unpack(name()), normalized_shape, weight.unpack(name()), eps,
          {should_compute_output(0), should_compute_output(1), should_compute_output(2)});
    }
    auto [dx, dw, db] = native::layer_norm_backward(
        grads[0], input.unpack(name()), normalized_shape, mean.unpack(name()), rstd.unpack(name()),
        weight.unpack(name()), should_compute_output(0), should_compute_output(1),
        should_compute_output(2));
    return {dx, dw, db};
  }
  void release_variables() override {
    input.reset();
    weight.reset();
    mean.reset();
    rstd.reset();
  }
};

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the op that records this node

Tensor layer_norm(const Tensor& input, const IntList& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  if (is_autocast_enabled() && input.defined() && input.dtype() == kBFloat16) {
    return layer_norm(float_input(input), normalized_shape, weight, bias, eps);
  }
  profiler::Scope prof("layer_norm");
  auto [out, mean, rstd] = native::layer_norm_forward(input, normalized_shape, weight, bias, eps);
  if (compute_requires_grad({input, weight, bias})) {
    auto node = std::make_shared<LayerNormBackward>();
    node->input = SavedVariable(input);
    node->weight = SavedVariable(weight);  // undefined without affine parameters
    node->mean = SavedVariable(mean);
    node->rstd = SavedVariable(rstd);
    node->normalized_shape = normalized_shape;
    node->eps = eps;
    record(node, {input, weight, bias}, {out});
  }
  return out;
}

}  // namespace lockstep
