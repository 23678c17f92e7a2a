// autograd/functions/softmax.cpp — softmax and log_softmax along a dim.
//
// Both save their output y, from which the backward is cheapest:
//   SoftmaxBackward     y = softmax(x)       dx = y * (g - sum(g * y, dim))
//   LogSoftmaxBackward  y = log_softmax(x)   dx = g - exp(y) * sum(g, dim)
// The reductions along `dim` live in native::softmax_backward and
// native::log_softmax_backward, next to the forward kernels; in a backward with
// create_graph the same formulas run as recording ops, y read through
// saved_result (Note [Double backward]).
//
// Read before: autograd/functions/functions.h. Read next: autograd/functions/linalg.cpp.
#include "autograd/functions/autocast_ops.h"
#include "autograd/functions/functions.h"
#include "core/profiler.h"

namespace lockstep::autograd {
namespace {

struct SoftmaxBackward final : DoubleBackwardNode {
  SavedVariable result;
  int64_t dim = 0;
  bool bf16_input = false;  // the input was bf16 read in place: dx is returned in bf16
  std::string name() const override { return "SoftmaxBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];
    if (!grad_ops::recording()) {
      const Tensor y = result.unpack(name());
      if (bf16_input) return {native::softmax_backward_bf16_input(g, y, dim, /*log=*/false)};
      return {native::softmax_backward(g, y, dim)};
    }
    Tensor y = saved_result(result, *this);
    Tensor dx = y * (g - (g * y).sum({dim}, /*keepdim=*/true));
    return {bf16_input ? dx.to(kBFloat16) : dx};  // the input's dtype, as the fused path returns
  }
  void release_variables() override { result.reset(); }
};

struct LogSoftmaxBackward final : DoubleBackwardNode {
  SavedVariable result;
  int64_t dim = 0;
  bool bf16_input = false;  // as SoftmaxBackward's
  std::string name() const override { return "LogSoftmaxBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];
    if (!grad_ops::recording()) {
      const Tensor y = result.unpack(name());
      if (bf16_input) return {native::softmax_backward_bf16_input(g, y, dim, /*log=*/true)};
      return {native::log_softmax_backward(g, y, dim)};
    }
    Tensor y = saved_result(result, *this);
    Tensor dx = g - y.exp() * g.sum({dim}, /*keepdim=*/true);
    return {bf16_input ? dx.to(kBFloat16) : dx};
  }
  void release_variables() override { result.reset(); }
};

}  // namespace

Tensor log_softmax_of_saved(const Tensor& log_probs, int64_t dim, const Edge& logits) {
  auto node = std::make_shared<LogSoftmaxBackward>();
  node->result = SavedVariable(log_probs);
  node->dim = dim;
  node->set_next_edges({logits});
  node->add_output_meta(log_probs);
  return saved_result(node->result, *node);  // its grad_fn keeps the node alive
}

}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the ops that record these nodes

Tensor Tensor::softmax(int64_t dim) const {
  const bool in_place = reads_bf16_in_place(*this);  // Note [float32 ops reading bfloat16 in place]
  if (is_autocast_enabled() && dtype() == kBFloat16 && !in_place) return to(kFloat32).softmax(dim);
  profiler::Scope prof("softmax");
  Tensor y = in_place ? native::softmax_bf16_input(*this, dim, /*log=*/false)
                      : native::softmax(*this, dim);
  if (compute_requires_grad({*this})) {
    auto node = std::make_shared<SoftmaxBackward>();
    node->result = SavedVariable(y);
    node->dim = dim;
    node->bf16_input = in_place;
    record(node, {*this}, {y});
  }
  return y;
}

Tensor Tensor::log_softmax(int64_t dim) const {
  const bool in_place = reads_bf16_in_place(*this);
  if (is_autocast_enabled() && dtype() == kBFloat16 && !in_place) {
    return to(kFloat32).log_softmax(dim);
  }
  profiler::Scope prof("log_softmax");
  Tensor y = in_place ? native::softmax_bf16_input(*this, dim, /*log=*/true)
                      : native::log_softmax(*this, dim);
  if (compute_requires_grad({*this})) {
    auto node = std::make_shared<LogSoftmaxBackward>();
    node->result = SavedVariable(y);
    node->dim = dim;
    node->bf16_input = in_place;
    record(node, {*this}, {y});
  }
  return y;
}

}  // namespace lockstep
