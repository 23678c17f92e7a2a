// autograd/functions/loss.cpp — ls::cross_entropy and ls::mse_loss.
//
// Both return a 0-d loss, so each backward receives one number g (1 when the
// loss is where backward() starts):
//   CrossEntropyBackward  dlogits = (softmax - onehot(target)) * g / count, zero rows
//                         for ignored targets; saves log_probs (N, C) and target
//   MseLossBackward       dinput = 2 (input - target) * g / n, dtarget = -dinput;
//                         saves input and target
// The formulas are in core/native/loss.cpp. Under bf16 autocast, CrossEntropyBackward
// saves the bf16 logits and their row shifts instead (Note [float32 ops reading
// bfloat16 in place] in autograd/functions/autocast_ops.h).
// Both support double backward (not the bf16 cross-entropy): in a backward with
// create_graph MseLossBackward's formula is written with recording ops, and
// CrossEntropyBackward's reads softmax as exp(log_probs) where log_probs is
// rebuilt as a log_softmax of the logits (log_softmax_of_saved in functions.h).
//
// Read before: autograd/functions/functions.h, core/native/loss.cpp.
// Read next: nn/functional.h.
#include "autograd/functions/autocast_ops.h"
#include "autograd/functions/functions.h"
#include "core/factory.h"
#include "core/native/nn_kernels_transformer.h"
#include "core/nn_ops.h"
#include "core/profiler.h"

namespace lockstep::autograd {
namespace {

struct CrossEntropyBackward final : BackwardNode {
  SavedVariable log_probs, target;  // (N, C) and int64 (N)
  SavedVariable logits, shift;      // instead of log_probs: bf16 (N, C) read in place, (N, 2)
  bool bf16_logits = false;         // logits and shift are saved, not log_probs
  int64_t ignore_index = -100;
  std::string name() const override { return "CrossEntropyBackward"; }
  bool supports_double_backward() const override { return !bf16_logits; }
  variable_list apply(variable_list&& grads) override {
    if (grad_ops::recording()) return {recorded_formula(grads[0])};
    if (bf16_logits) {
      return {native::cross_entropy_bf16_backward(grads[0], logits.unpack(name()),
                                                  shift.unpack(name()), target.unpack(name()),
                                                  ignore_index)};
    }
    return {native::cross_entropy_backward(grads[0], log_probs.unpack(name()),
                                           target.unpack(name()), ignore_index)};
  }
  // dlogits = (exp(log_probs) - onehot(target)) * g / count, count the kept rows; the
  // one-hot and the rows' 1/count (0 where ignored) are constants.
  Tensor recorded_formula(const Tensor& g) {
    const Tensor lp = log_softmax_of_saved(log_probs.unpack(name()), 1, next_edges()[0]);  // (N, C)
    const Tensor t = target.unpack(name());
    const int64_t N = lp.size(0), C = lp.size(1);
    const Tensor kept = native::to_dtype(
        native::compare_scalar(native::CompareOp::Ne, t, static_cast<double>(ignore_index)), lp.dtype());
    const Tensor count = native::sum(kept, {0}, /*keepdim=*/false);
    const Tensor row_weight = native::reshape(native::binary(native::BinaryOp::Div, kept, count), {N, 1});
    const Tensor classes = native::reshape(arange(C, TensorOptions().dtype(kInt64).device(t.device())), {1, C});
    const Tensor one_hot = native::to_dtype(
        native::compare(native::CompareOp::Eq, classes, native::reshape(t, {N, 1})), lp.dtype());
    return (lp.exp() - one_hot) * (g * row_weight);
  }
  void release_variables() override {
    log_probs.reset();
    logits.reset();
    shift.reset();
    target.reset();
  }
};

struct MseLossBackward final : DoubleBackwardNode {
  SavedVariable input, target;
  std::string name() const override { return "MseLossBackward"; }
  variable_list apply(variable_list&& grads) override {
    if (grad_ops::recording()) {  // d = 2 (x - y) g / n; dx = d, dy = -d
      const Tensor x = input.unpack(name()), y = target.unpack(name());
      const Tensor d = (x - y) * (grads[0] * (2.0 / static_cast<double>(x.numel())));
      return {should_compute_output(0) ? d : Tensor(), should_compute_output(1) ? -d : Tensor()};
    }
    Tensor dx = native::mse_loss_backward(grads[0], input.unpack(name()), target.unpack(name()));
    Tensor dy = should_compute_output(1) ? native::unary(native::UnaryOp::Neg, dx) : Tensor();
    return {should_compute_output(0) ? dx : Tensor(), dy};
  }
  void release_variables() override {
    input.reset();
    target.reset();
  }
};

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the ops that record these nodes

Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index) {
  // The bf16 logits read as they are: Note [float32 ops reading bfloat16 in place].
  const bool in_place = reads_bf16_in_place(logits);
  if (is_autocast_enabled() && logits.defined() && logits.dtype() == kBFloat16 && !in_place) {
    return cross_entropy(float_input(logits), target, ignore_index);
  }
  profiler::Scope prof("cross_entropy");
  auto [loss, saved] = in_place ? native::cross_entropy_bf16_forward(logits, target, ignore_index)
                                : native::cross_entropy_forward(logits, target, ignore_index);
  if (compute_requires_grad({logits})) {
    auto node = std::make_shared<CrossEntropyBackward>();
    node->bf16_logits = in_place;
    if (in_place) {
      node->logits = SavedVariable(logits);
      node->shift = SavedVariable(saved);
    } else {
      node->log_probs = SavedVariable(saved);
    }
    node->target = SavedVariable(target);
    node->ignore_index = ignore_index;
    record(node, {logits}, {loss});
  }
  return loss;
}

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  if (is_autocast_enabled() && ((input.defined() && input.dtype() == kBFloat16) ||
                                (target.defined() && target.dtype() == kBFloat16))) {
    return mse_loss(float_input(input), float_input(target));
  }
  profiler::Scope prof("mse_loss");
  Tensor loss = native::mse_loss_forward(input, target);
  if (compute_requires_grad({input, target})) {
    auto node = std::make_shared<MseLossBackward>();
    node->input = SavedVariable(input);
    node->target = SavedVariable(target);
    record(node, {input, target}, {loss});
  }
  return loss;
}

}  // namespace lockstep
