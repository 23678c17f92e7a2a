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
  std::string name() const override { return "SoftmaxBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];
    if (!grad_ops::recording()) return {native::softmax_backward(g, result.unpack(name()), dim)};
    Tensor y = saved_result(result, *this);
    return {y * (g - (g * y).sum({dim}, /*keepdim=*/true))};
  }
  void release_variables() override { result.reset(); }
};

struct LogSoftmaxBackward final : DoubleBackwardNode {
  SavedVariable result;
  int64_t dim = 0;
  std::string name() const override { return "LogSoftmaxBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];
    if (!grad_ops::recording()) return {native::log_softmax_backward(g, result.unpack(name()), dim)};
    Tensor y = saved_result(result, *this);
    return {g - y.exp() * g.sum({dim}, /*keepdim=*/true)};
  }
  void release_variables() override { result.reset(); }
};

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the ops that record these nodes

Tensor Tensor::softmax(int64_t dim) const {
  if (is_autocast_enabled() && dtype() == kBFloat16) return to(kFloat32).softmax(dim);
  profiler::Scope prof("softmax");
  Tensor y = native::softmax(*this, dim);
  if (compute_requires_grad({*this})) {
    auto node = std::make_shared<SoftmaxBackward>();
    node->result = SavedVariable(y);
    node->dim = dim;
    record(node, {*this}, {y});
  }
  return y;
}

Tensor Tensor::log_softmax(int64_t dim) const {
  if (is_autocast_enabled() && dtype() == kBFloat16) return to(kFloat32).log_softmax(dim);
  profiler::Scope prof("log_softmax");
  Tensor y = native::log_softmax(*this, dim);
  if (compute_requires_grad({*this})) {
    auto node = std::make_shared<LogSoftmaxBackward>();
    node->result = SavedVariable(y);
    node->dim = dim;
    record(node, {*this}, {y});
  }
  return y;
}

}  // namespace lockstep
