// autograd/functions/batch_norm_pair.cpp — batch_norm_add_batch_norm_relu, the
// differentiable op: relu(batch_norm(input) + batch_norm(residual)) as one node.
//
// A ResNet block that downsamples ends in relu(bn3(x) + bn_d(r)); as batch_norm and
// batch_norm_add_relu, bn_d's output and its gradient are each written and read back
// once (Note [Downsample batch norm folded] in
// core/native/fast/batch_norm_bf16_nhwc_pair.cpp says what the kernel does instead).
// Its node, BatchNormAddBatchNormReluBackward, has six edges: input, weight, bias,
// residual, residual_weight, residual_bias, and saves what the two batch norms'
// nodes would (each input, weight, mean and invstd) plus the ReLU's mask: the bits on
// channels-last bf16 inputs (Note [ReLU mask in bits] in batch_norm.cpp), else the
// output. Both batch norms' weights and biases get their gradients from this one
// node, so DDP sees bn_d's ready together with bn3's (the order of readiness it
// handles; nothing depends on bn_d coming later).
//
// Double backward: the recorded formula is batch_norm_add_relu's (batch norm's
// backward of g times the mask) once for each input, the same masked g going to both.
//
// Read before: autograd/functions/batch_norm.cpp, core/native/batch_norm_pair.h.
// Read next: models/resnet.cpp (where ResNet's downsampling blocks call it).
#include "core/native/batch_norm_pair.h"
#include "autograd/functions/autocast_ops.h"
#include "autograd/functions/functions.h"
#include "autograd/functions/norm_recorded.h"
#include "autograd/traffic.h"
#include "core/env_flag.h"
#include "core/nn_ops.h"
#include "core/profiler.h"

namespace lockstep::autograd {
namespace {

struct BatchNormAddBatchNormReluBackward final : BackwardNode {
  SavedVariable input, weight, save_mean, save_invstd;
  SavedVariable residual, residual_weight, residual_save_mean, residual_save_invstd;
  SavedVariable mask_source;  // the ReLU's mask: bits, or the output
  bool mask_in_bits = false;
  bool training = true;
  double eps = 1e-5;  // to recompute the batch statistics with history (double backward)

  std::string name() const override { return "BatchNormAddBatchNormReluBackward"; }
  bool supports_double_backward() const override { return true; }
  void release_variables() override {
    for (SavedVariable* v : {&input, &weight, &save_mean, &save_invstd, &residual, &residual_weight,
                             &residual_save_mean, &residual_save_invstd, &mask_source}) {
      v->reset();
    }
  }

  variable_list apply(variable_list&& grads) override {
    const std::array<bool, 6> need = {should_compute_output(0), should_compute_output(1),
                                      should_compute_output(2), should_compute_output(3),
                                      should_compute_output(4), should_compute_output(5)};
    const Tensor x = input.unpack(name()), w = weight.unpack(name());
    const Tensor mean = save_mean.unpack(name()), invstd = save_invstd.unpack(name());
    const Tensor r = residual.unpack(name()), rw = residual_weight.unpack(name());
    const Tensor r_mean = residual_save_mean.unpack(name());
    const Tensor r_invstd = residual_save_invstd.unpack(name());
    const Tensor mask = mask_source.unpack(name());
    if (grad_ops::recording()) {
      const Tensor relu = mask_in_bits ? relu_mask_from_bits(x, w, mean, invstd, mask, training)
                                       : relu_mask(mask);  // Note [Fused BatchNorm + ReLU]
      const ScalarType dt = norm_compute_dtype(x.dtype());
      const Tensor g = grad_ops::to_dtype(grads[0], dt) * mask_to(relu, dt);
      variable_list d = batch_norm_backward_recorded(g, x, w, mean, invstd, training, eps,
                                                     {need[0], need[1], need[2]});
      variable_list dr = batch_norm_backward_recorded(g, r, rw, r_mean, r_invstd, training, eps,
                                                      {need[3], need[4], need[5]});
      d.insert(d.end(), dr.begin(), dr.end());
      return d;
    }
    const Tensor g = native::to_dtype(grads[0], x.dtype());  // the output's dtype
    native::BatchNormPairGrads d = native::batch_norm_pair_backward(
        g, x, w, mean, invstd, r, rw, r_mean, r_invstd, mask, mask_in_bits, training, need);
    return {d.grad_input,    d.grad_weight,          d.grad_bias,
            d.grad_residual, d.grad_residual_weight, d.grad_residual_bias};
  }
};

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the op that records this node

Tensor batch_norm_add_batch_norm_relu(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                      const Tensor& running_mean, const Tensor& running_var,
                                      const Tensor& residual, const Tensor& residual_weight,
                                      const Tensor& residual_bias,
                                      const Tensor& residual_running_mean,
                                      const Tensor& residual_running_var, bool training,
                                      double momentum, double eps) {
  // Under autocast a bf16 input with a float32 residual (or the other way round)
  // computes in float32, as batch_norm_add_relu does.
  if (is_autocast_enabled() && input.defined() && residual.defined() &&
      input.dtype() != residual.dtype() &&
      (input.dtype() == kBFloat16 || residual.dtype() == kBFloat16)) {
    return batch_norm_add_batch_norm_relu(float_input(input), weight, bias, running_mean,
                                          running_var, float_input(residual), residual_weight,
                                          residual_bias, residual_running_mean,
                                          residual_running_var, training, momentum, eps);
  }
  profiler::Scope prof("batch_norm_add_batch_norm_relu");
  static const bool bits_on = env_flag("LOCKSTEP_BF16_RELU_BITS", true);
  const bool grad =
      compute_requires_grad({input, weight, bias, residual, residual_weight, residual_bias});
  Tensor bits;  // (N H W, 2 * ceil(C / 16)) uint8, or undefined: the output is the mask
  native::BatchNormPairForward f = native::batch_norm_pair_forward(
      input, {weight, bias, running_mean, running_var}, residual,
      {residual_weight, residual_bias, residual_running_mean, residual_running_var}, training,
      momentum, eps, grad && bits_on ? &bits : nullptr);
  if (grad) {
    auto node = std::make_shared<BatchNormAddBatchNormReluBackward>();
    node->input = SavedVariable(input);
    node->weight = SavedVariable(weight);
    node->save_mean = SavedVariable(f.save_mean);
    node->save_invstd = SavedVariable(f.save_invstd);
    node->residual = SavedVariable(residual);
    node->residual_weight = SavedVariable(residual_weight);
    node->residual_save_mean = SavedVariable(f.residual_save_mean);
    node->residual_save_invstd = SavedVariable(f.residual_save_invstd);
    node->mask_in_bits = bits.defined();
    node->mask_source = SavedVariable(bits.defined() ? bits : f.output);
    if (bits.defined()) profiler::add_bytes(distinct_bytes(bits));  // Note [Profiler bytes]
    node->training = training;
    node->eps = eps;
    record(node, {input, weight, bias, residual, residual_weight, residual_bias}, {f.output});
  }
  return f.output;
}

}  // namespace lockstep
