// autograd/functions/loss_extra.cpp — nll_loss, binary_cross_entropy(_with_logits),
// smooth_l1_loss (core/losses.h).
//
// nll_loss, binary_cross_entropy and smooth_l1_loss are compositions of
// differentiable ops (gather and where, log, maximum, ...), so their gradients are those
// ops' gradients. binary_cross_entropy_with_logits has its own node: its stable
// formula is built from relu and abs, whose gradients at x = 0 are conventions,
// not the loss's derivative; the node returns the exact one,
//   BceWithLogitsBackward   dx = g * (sigmoid(x) - y)      dy = -g * x
// written with grad_ops.h, so it supports double backward (Note [Double backward]);
// the compositions do through their ops.
// Read before: core/losses.h, autograd/functions/loss.cpp.
// Read next: autograd/functions/conv_transpose.cpp.
#include <cmath>

#include "autograd/functions/autocast_ops.h"
#include "autograd/functions/functions.h"
#include "core/factory.h"
#include "core/losses.h"
#include "core/profiler.h"

namespace lockstep::autograd {
namespace {

struct BceWithLogitsBackward final : DoubleBackwardNode {
  SavedVariable input, target;
  std::string name() const override { return "BinaryCrossEntropyWithLogitsBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];
    const Tensor x = input.unpack(name()), y = target.unpack(name());
    Tensor dx, dy;
    if (should_compute_output(0)) {
      Tensor s = grad_ops::sigmoid(x);
      Tensor s_minus_y = grad_ops::recording() ? s - y : native::binary(native::BinaryOp::Sub, s, y);
      dx = grad_ops::to_dtype(grad_ops::mul(g, s_minus_y), x.dtype());
    }
    if (should_compute_output(1)) dy = grad_ops::to_dtype(grad_ops::neg(grad_ops::mul(g, x)), y.dtype());
    return {dx, dy};
  }
  void release_variables() override {
    input.reset();
    target.reset();
  }
};

Tensor reduce(const Tensor& per_element, Reduction reduction) {
  switch (reduction) {
    case Reduction::None: return per_element;
    case Reduction::Sum: return per_element.sum();
    case Reduction::Mean: return per_element.mean();
  }
  throw Error("loss: unknown reduction");
}

// input and target of the same shape, floating (the elementwise losses).
void check_pair(const char* op, const Tensor& input, const Tensor& target) {
  LS_CHECK(input.defined() && target.defined(), op, ": got an undefined tensor");
  LS_CHECK(input.sizes() == target.sizes(), op, ": input ", input.shape_str(), " and target ",
           target.shape_str(), " must have the same shape");
  LS_CHECK(input.is_floating_point() && target.is_floating_point(), op, ": input and target must be "
           "floating point but are ", input.dtype(), " and ", target.dtype(),
           "; convert the target with .to(ls::kFloat32)");
}

// Under autocast, bf16 operands compute in float32 (Note [Autocast policy]).
Tensor f32(const Tensor& t) { return float_input(t); }

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the ops that record these nodes

Tensor nll_loss(const Tensor& log_probs_in, const Tensor& target, Reduction reduction, int64_t ignore_index) {
  profiler::Scope prof("nll_loss");
  const Tensor log_probs = f32(log_probs_in);
  LS_CHECK(log_probs.defined() && log_probs.dim() == 2, "nll_loss: expected log_probs (N, C) but got ",
           log_probs.defined() ? log_probs.shape_str() : "an undefined tensor");
  LS_CHECK(target.defined() && target.dtype() == kInt64 && target.dim() == 1 &&
               target.size(0) == log_probs.size(0),
           "nll_loss: expected int64 targets (N) = (", log_probs.size(0), ") but got ",
           target.defined() ? target.shape_str() + " " + dtype_name(target.dtype()) : "an undefined tensor");
  const Tensor kept = target.ne(static_cast<double>(ignore_index));  // (N) bool
  const int64_t C = log_probs.size(1);
  const Tensor zero_i = scalar_tensor(0.0, TensorOptions().dtype(kInt64).device(target.device()));
  const Tensor safe = where(kept, target, zero_i);  // (N): ignored rows check as class 0
  LS_CHECK(safe.numel() == 0 || (safe.min().item<int64_t>() >= 0 && safe.max().item<int64_t>() < C),
           "nll_loss: targets must be in [0, ", C, ") or ignore_index (", ignore_index, ")");
  // The target's column of each row, gathered (O(N), where a one-hot mask over (N, C)
  // costs a pass over every class: the vocabulary of a language model); an ignored
  // row reads class 0 and is then replaced by 0.
  const Tensor picked = log_probs.gather(1, safe.unsqueeze(1)).squeeze(1);  // (N)
  const Tensor zero = scalar_tensor(0.0, TensorOptions().dtype(log_probs.dtype()).device(log_probs.device()));
  // where, not a product with a 0/1 mask: an ignored row's class-0 log-prob may be -inf.
  const Tensor per_example = -where(kept, picked, zero);  // (N); 0 where ignored
  if (reduction != Reduction::Mean) return reduce(per_example, reduction);
  // The mean over the kept targets (PyTorch: NaN when every target is ignored).
  return per_example.sum() / kept.to(log_probs.dtype()).sum();
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight, Reduction reduction,
                int64_t ignore_index) {
  if (!weight.defined()) return nll_loss(log_probs, target, reduction, ignore_index);
  const Tensor per_example = nll_loss(log_probs, target, Reduction::None, ignore_index);  // (N); checks the inputs
  LS_CHECK(weight.dim() == 1 && weight.size(0) == log_probs.size(1), "nll_loss: expected one weight per class (",
           log_probs.size(1), ") but got ", weight.shape_str());
  const Tensor kept = target.ne(static_cast<double>(ignore_index));  // (N) bool
  const Tensor zero_i = scalar_tensor(0.0, TensorOptions().dtype(kInt64).device(target.device()));
  const Tensor zero = scalar_tensor(0.0, TensorOptions().dtype(per_example.dtype()).device(per_example.device()));
  // (N): each row's class weight, 0 where ignored.
  const Tensor w = where(kept, f32(weight).index_select(0, where(kept, target, zero_i)), zero);
  const Tensor weighted = per_example * w;  // (N)
  if (reduction != Reduction::Mean) return reduce(weighted, reduction);
  return weighted.sum() / w.sum();
}

Tensor binary_cross_entropy(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  profiler::Scope prof("binary_cross_entropy");
  const Tensor input = f32(input_in), target = f32(target_in);
  check_pair("binary_cross_entropy", input, target);
  {
    NoGradGuard no_grad;
    LS_CHECK(input.numel() == 0 || (input.min().item<double>() >= 0.0 && input.max().item<double>() <= 1.0),
             "binary_cross_entropy: input must hold probabilities in [0, 1]; for logits use "
             "binary_cross_entropy_with_logits");
  }
  const Tensor floor = scalar_tensor(-100.0, TensorOptions().dtype(input.dtype()).device(input.device()));  // PyTorch clamps each log at -100
  const Tensor log_p = maximum(input.log(), floor);
  const Tensor log_1mp = maximum((1.0 - input).log(), floor);
  return reduce(-(target * log_p + (1.0 - target) * log_1mp), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  profiler::Scope prof("binary_cross_entropy_with_logits");
  const Tensor x = f32(input_in), y = f32(target_in);
  check_pair("binary_cross_entropy_with_logits", x, y);
  Tensor per_element;
  {
    NoGradGuard no_grad;  // the value only; the node below differentiates it
    per_element = x.relu() - x * y + ((-x.abs()).exp() + 1.0).log();
  }
  if (compute_requires_grad({x, y})) {
    auto node = std::make_shared<BceWithLogitsBackward>();
    node->input = SavedVariable(x);
    node->target = SavedVariable(y);
    record(node, {x, y}, {per_element});
  }
  return reduce(per_element, reduction);
}

Tensor smooth_l1_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction, double beta) {
  profiler::Scope prof("smooth_l1_loss");
  const Tensor input = f32(input_in), target = f32(target_in);
  check_pair("smooth_l1_loss", input, target);
  LS_CHECK(beta >= 0.0, "smooth_l1_loss: beta must be >= 0 but got ", beta);
  const Tensor d = input - target;
  if (beta == 0.0) return reduce(d.abs(), reduction);  // PyTorch: plain L1
  const Tensor quadratic = d * d * (0.5 / beta);
  const Tensor linear = d.abs() - 0.5 * beta;
  return reduce(where(d.abs().lt(beta), quadratic, linear), reduction);
}

}  // namespace lockstep
