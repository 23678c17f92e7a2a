// autograd/functions/batch_norm.cpp — batch_norm, the differentiable op.
//
// BatchNormBackward has three gradient edges: input, weight, bias (undefined
// weight/bias have invalid edges). The running statistics are buffers, not
// inputs: they get no gradient, and their in-place update happens in the
// forward kernel. The node saves the input, the weight, and the per-channel
// mean and invstd the forward used (batch statistics when training, running
// ones in eval), which is all the formulas in core/native/batch_norm.cpp need.
//
// Read before: autograd/functions/functions.h, core/native/nn_kernels.h.
// Read next: nn/ (BatchNorm2d).
#include "autograd/functions/functions.h"
#include "core/native/nn_kernels.h"
#include "core/nn_ops.h"
#include "core/profiler.h"

namespace lockstep::autograd {
namespace {

struct BatchNormBackward final : BackwardNode {
  SavedVariable input, weight, save_mean, save_invstd;  // weight may be undefined
  bool training = true;
  std::string name() const override { return "BatchNormBackward"; }

  variable_list apply(variable_list&& grads) override {
    auto [grad_input, grad_weight, grad_bias] = native::batch_norm_backward(
        grads[0], input.unpack(name()), weight.unpack(name()), save_mean.unpack(name()),
        save_invstd.unpack(name()), training, should_compute_output(0), should_compute_output(1),
        should_compute_output(2));
    return {grad_input, grad_weight, grad_bias};
  }

  void release_variables() override {
    input.reset();
    weight.reset();
    save_mean.reset();
    save_invstd.reset();
  }
};

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the op that records this node

Tensor batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum, double eps) {
  profiler::Scope prof("batch_norm");
  auto [out, save_mean, save_invstd] = native::batch_norm_forward(
      input, weight, bias, running_mean, running_var, training, momentum, eps);
  if (compute_requires_grad({input, weight, bias})) {
    auto node = std::make_shared<BatchNormBackward>();
    node->input = SavedVariable(input);
    node->weight = SavedVariable(weight);
    node->save_mean = SavedVariable(save_mean);
    node->save_invstd = SavedVariable(save_invstd);
    node->training = training;
    record(node, {input, weight, bias}, {out});
  }
  return out;
}

}  // namespace lockstep
