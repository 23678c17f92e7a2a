// autograd/functions/batch_norm.cpp — batch_norm, the differentiable op.
//
// BatchNormBackward has three gradient edges: input, weight, bias (undefined
// weight/bias have invalid edges). The running statistics are buffers, not
// inputs: they get no gradient, and their in-place update happens in the
// forward kernel. The node saves the input, the weight, and the per-channel
// mean and invstd the forward used (batch statistics when training, running
// ones in eval), which is all the formulas in core/native/batch_norm.cpp need.
//
// § Note [Fused BatchNorm + ReLU]
// batch_norm_relu(x, ...) = relu(batch_norm(x, ...)) as one op, for the
// BatchNorm -> ReLU pairs of ResNet. torchvision writes them as
// relu(bn(x)) with ReLU(inplace=True): the ReLU overwrites the batch-norm
// output, so only two activations per pair are alive, bn's input (saved for
// its backward) and the ReLU output (saved for its mask and by the next conv).
// Out of place, a third, the batch-norm output, is written, read back and
// freed: a full extra pass over memory, and extra memory for as long as it
// lives. An in-place relu_ would need a check that nothing saved the
// batch-norm output (the version counter would catch it at backward, too
// late to choose differently); a fused op needs no check at all. Its node,
// BatchNormReluBackward, saves the same as BatchNormBackward plus what gives
// the ReLU's mask (out > 0 iff bn(x) > 0), and the backward kernel masks the
// incoming gradient on the fly (core/native/fused_relu.h). On the CPU that is
// the bias: the kernel recomputes bn(x) > 0 from the input it reads anyway,
// exactly as the forward rounded it (Note [ReLU mask from the input] in
// core/native/batch_norm.cpp). On a GPU it is the fused output, saved as data
// only (Note [Saved tensor versions]), so saving it creates no reference
// cycle, and it is the tensor the next layer keeps anyway. add_relu
// (autograd/functions/add_relu.cpp) does the same for a block's residual add +
// ReLU, with its output.
//
// § Note [Fused BatchNorm + add + ReLU]
// A residual block ends in relu(bn3(x) + identity). As batch_norm then
// add_relu, bn3's output is written in full, read back once by the add and
// freed: two passes over an activation-sized tensor (up to 25 MB per ResNet50
// block at batch 8) that the fused op batch_norm_add_relu does not make. Its
// node, BatchNormAddReluBackward, saves what BatchNormBackward saves plus the
// fused output (the ReLU's mask, which add_relu saves anyway); its backward is
// the two backwards in one kernel: g = grad * (out > 0), the residual's
// gradient, is stored by batch-norm backward's statistics pass, which reads grad
// and out anyway, and its grad_input pass reads g back while the channel is
// still in cache (ResNet50's forward ops before and after: docs/results/kernel_choices.md).
// The block calls it
// with its identity already computed (after the downsample), which moves the
// downsample before bn3 in forward order and changes nothing else; where the
// downsample ends in its own batch norm, the block calls
// batch_norm_add_batch_norm_relu instead (autograd/functions/batch_norm_pair.cpp).
//
// All three nodes support double backward. BatchNormBackward's recorded formula
// is in autograd/functions/norm_recorded.cpp; the fused nodes' is the same
// formula applied to g times the ReLU's mask (relu's backward composed before
// batch norm's, as relu(batch_norm(x)) would record it), and the residual of
// batch_norm_add_relu gets that masked g. The mask is a constant (relu'' = 0): the
// fused output > 0 where the node saved it, recomputed from the input and the
// saved statistics where it saved the bias, read from the bits through the
// kernel (a gradient of ones masked) where it saved those.
//
// § Note [ReLU mask in bits]
// BatchNormAddReluBackward needs only out > 0 of the fused output, one bit a
// value, yet read the whole bf16 output for it: 16 bits a value, an
// activation-sized read (88 MB of a ResNet50 bf16 step at batch 8, 16 blocks).
// On a channels-last bfloat16 input the forward now also writes the mask as
// bits (fast/batch_norm_bf16_nhwc.cpp: 16 values' bits in one 16-bit word, the
// AVX-512 compare's own mask register), the node saves them instead of the
// output, and the backward kernel reads them (Mask::Bits): 1/16 of the bytes.
// The bit is y > 0 of the bf16 value stored (the forward rounds, widens back and
// compares), so the gradients equal those of the output's mask bit for bit
// (tests/autograd/test_batch_norm_relu_bits.cpp). The output itself is no longer
// saved by this node; the next layer's convolution and residual still keep it.
// Other inputs (float32, NCHW, a GPU) save the output as before, and
// LOCKSTEP_BF16_RELU_BITS=0 restores that everywhere (A/B runs).
//
// Read before: autograd/functions/functions.h, core/native/nn_kernels.h.
// Read next: autograd/functions/batch_norm_pair.cpp (a downsampling block's two batch
// norms in one node), autograd/functions/norm_recorded.h, nn/ (BatchNorm2d).
#include <tuple>

#include "autograd/functions/autocast_ops.h"
#include "autograd/functions/norm_recorded.h"
#include "autograd/functions/functions.h"
#include "autograd/traffic.h"
#include "core/env_flag.h"
#include "core/native/fused_relu.h"
#include "core/native/nn_kernels.h"
#include "core/nn_ops.h"
#include "core/profiler.h"

namespace lockstep::autograd {
namespace {

// What every batch-norm node saves: the input, the weight (may be undefined),
// the per-channel mean and invstd the forward used, and, for the fused ops, the
// output (the ReLU's mask).
struct BatchNormNode : BackwardNode {
  SavedVariable input, weight, save_mean, save_invstd;
  SavedVariable output;     // fused ops only (batch_norm_relu: on a GPU)
  SavedVariable relu_bits;  // batch_norm_add_relu instead of output (Note [ReLU mask in bits])
  SavedVariable bias;       // batch_norm_relu on the CPU
  bool training = true;
  double eps = 1e-5;  // to recompute the batch statistics with history (double backward)

  void release_variables() override {
    input.reset();
    weight.reset();
    bias.reset();
    save_mean.reset();
    save_invstd.reset();
    output.reset();
    relu_bits.reset();
  }
};

// batch_norm_relu's mask recomputed from its input: x * scale + shift > 0 with the
// per-channel scale = invstd w and shift = b - mean scale, in the statistics'
// dtype. The kernel's mask rounds as the forward did (one fused multiply-add,
// Note [ReLU mask from the input] in core/native/batch_norm.cpp); this one may
// differ from it only where the output is within a rounding of 0.
Tensor relu_mask_from_input(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean,
                            const Tensor& invstd) {
  NoGradGuard no_grad;  // a constant of the formula
  const ScalarType dt = mean.dtype();
  IntList per_channel(static_cast<size_t>(x.dim()), 1);  // (1, C, 1, ...)
  per_channel[1] = x.size(1);
  const Tensor scale = w.defined() ? invstd * w.to(dt) : invstd;              // (C)
  const Tensor shift = b.defined() ? b.to(dt) - mean * scale : -(mean * scale);  // (C)
  const Tensor y = x.to(dt) * scale.reshape(per_channel) + shift.reshape(per_channel);
  return relu_mask(y);
}

// With relu, the node of batch_norm_relu, whose mask comes from the input and
// `bias` on the CPU, from the fused `output` on a GPU (Note [Fused BatchNorm +
// ReLU]).
struct BatchNormBackward final : BatchNormNode {
  bool relu = false;
  bool mask_from_input = false;  // relu on the CPU
  std::string name() const override { return relu ? "BatchNormReluBackward" : "BatchNormBackward"; }
  bool supports_double_backward() const override { return true; }

  variable_list apply(variable_list&& grads) override {
    const bool gi = should_compute_output(0), gw = should_compute_output(1),
               gb = should_compute_output(2);
    const Tensor x = input.unpack(name()), w = weight.unpack(name());
    const Tensor mean = save_mean.unpack(name()), invstd = save_invstd.unpack(name());
    if (grad_ops::recording()) {
      Tensor g = grads[0];
      if (relu) {
        const Tensor mask = mask_from_input ? relu_mask_from_input(x, w, bias.unpack(name()), mean, invstd)
                                            : relu_mask(output.unpack(name()));
        g = grad_ops::to_dtype(g, norm_compute_dtype(x.dtype()));
        g = g * mask_to(mask, g.dtype());
      }
      return batch_norm_backward_recorded(g, x, w, mean, invstd, training, eps, {gi, gw, gb});
    }
    const Tensor g = native::to_dtype(grads[0], x.dtype());  // the output's dtype
    auto [grad_input, grad_weight, grad_bias] =
        !relu ? native::batch_norm_backward(g, x, w, mean, invstd, training, gi, gw, gb)
        : mask_from_input
            ? native::batch_norm_relu_backward_from_input(g, x, w, bias.unpack(name()), mean,
                                                          invstd, training, gi, gw, gb)
            : native::batch_norm_relu_backward(g, x, w, mean, invstd, output.unpack(name()),
                                               training, gi, gw, gb);
    return {grad_input, grad_weight, grad_bias};
  }
};

// The node of batch_norm_add_relu (Note [Fused BatchNorm + add + ReLU]); edges:
// input, weight, bias, residual.
struct BatchNormAddReluBackward final : BatchNormNode {
  bool mask_in_bits = false;  // relu_bits saved, not output (Note [ReLU mask in bits])
  std::string name() const override { return "BatchNormAddReluBackward"; }
  bool supports_double_backward() const override { return true; }

  variable_list apply(variable_list&& grads) override {
    const bool gi = should_compute_output(0), gw = should_compute_output(1),
               gb = should_compute_output(2);
    const Tensor x = input.unpack(name()), w = weight.unpack(name());
    const Tensor mean = save_mean.unpack(name()), invstd = save_invstd.unpack(name());
    if (grad_ops::recording()) {
      const Tensor mask = mask_in_bits ? relu_mask_from_bits(x, w, mean, invstd, relu_bits.unpack(name()), training)
                                       : relu_mask(output.unpack(name()));
      const ScalarType dt = norm_compute_dtype(x.dtype());
      const Tensor g = grad_ops::to_dtype(grads[0], dt) * mask_to(mask, dt);
      variable_list d = batch_norm_backward_recorded(g, x, w, mean, invstd, training, eps, {gi, gw, gb});
      d.push_back(should_compute_output(3) ? grad_ops::to_dtype(g, x.dtype()) : Tensor());
      return d;
    }
    const Tensor g = native::to_dtype(grads[0], x.dtype());
    auto [grad_input, grad_weight, grad_bias, grad_residual] =
        mask_in_bits
            ? native::batch_norm_add_relu_backward_bits(g, x, w, mean, invstd,
                                                        relu_bits.unpack(name()), training, gi,
                                                        gw, gb)
            : native::batch_norm_add_relu_backward(g, x, w, mean, invstd, output.unpack(name()),
                                                   training, gi, gw, gb);
    return {grad_input, grad_weight, grad_bias,
            should_compute_output(3) ? grad_residual : Tensor()};
  }
};

// Runs the (fused) forward kernel and records the node.
Tensor batch_norm_op(const Tensor& input, const Tensor& weight, const Tensor& bias,
                     const Tensor& running_mean, const Tensor& running_var, bool training,
                     double momentum, double eps, bool relu) {
  profiler::Scope prof(relu ? "batch_norm_relu" : "batch_norm");
  auto [out, save_mean, save_invstd] =
      relu ? native::batch_norm_relu_forward(input, weight, bias, running_mean, running_var,
                                             training, momentum, eps)
           : native::batch_norm_forward(input, weight, bias, running_mean, running_var, training,
                                        momentum, eps);
  if (compute_requires_grad({input, weight, bias})) {
    auto node = std::make_shared<BatchNormBackward>();
    node->input = SavedVariable(input);
    node->weight = SavedVariable(weight);
    node->save_mean = SavedVariable(save_mean);
    node->save_invstd = SavedVariable(save_invstd);
    node->relu = relu;
    node->mask_from_input = relu && !input.device().is_cuda();
    if (node->mask_from_input) node->bias = SavedVariable(bias);
    if (relu && !node->mask_from_input) node->output = SavedVariable(out);
    node->training = training;
    node->eps = eps;
    record(node, {input, weight, bias}, {out});
  }
  return out;
}

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the op that records this node

Tensor batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum, double eps) {
  return batch_norm_op(input, weight, bias, running_mean, running_var, training, momentum, eps,
                       false);
}

Tensor batch_norm_relu(const Tensor& input, const Tensor& weight, const Tensor& bias,
                       const Tensor& running_mean, const Tensor& running_var, bool training,
                       double momentum, double eps) {
  return batch_norm_op(input, weight, bias, running_mean, running_var, training, momentum, eps,
                       true);
}

Tensor batch_norm_add_relu(const Tensor& input, const Tensor& residual, const Tensor& weight,
                           const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, bool training, double momentum, double eps) {
  // Under autocast a bf16 input with a float32 residual (or the other way round)
  // computes in float32, as promote_types of the two would.
  if (is_autocast_enabled() && input.defined() && residual.defined() &&
      input.dtype() != residual.dtype() &&
      (input.dtype() == kBFloat16 || residual.dtype() == kBFloat16)) {
    return batch_norm_add_relu(float_input(input), float_input(residual), weight, bias,
                               running_mean, running_var, training, momentum, eps);
  }
  profiler::Scope prof("batch_norm_add_relu");
  static const bool bits_on = env_flag("LOCKSTEP_BF16_RELU_BITS", true);
  const bool grad = compute_requires_grad({input, weight, bias, residual});
  Tensor bits;  // (N H W, 2 * ceil(C / 16)) uint8, or undefined: the output is the mask
  auto [out, save_mean, save_invstd] =
      native::batch_norm_add_relu_forward(input, residual, weight, bias, running_mean, running_var,
                                          training, momentum, eps, grad && bits_on ? &bits : nullptr);
  if (grad) {
    auto node = std::make_shared<BatchNormAddReluBackward>();
    node->input = SavedVariable(input);
    node->weight = SavedVariable(weight);
    node->save_mean = SavedVariable(save_mean);
    node->save_invstd = SavedVariable(save_invstd);
    if (bits.defined()) {
      node->relu_bits = SavedVariable(bits);
      node->mask_in_bits = true;
      profiler::add_bytes(distinct_bytes(bits));  // written beside the output (Note [Profiler bytes])
    } else {
      node->output = SavedVariable(out);
    }
    node->training = training;
    node->eps = eps;
    record(node, {input, weight, bias, residual}, {out});
  }
  return out;
}

}  // namespace lockstep
