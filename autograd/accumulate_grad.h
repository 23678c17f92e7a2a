// autograd/accumulate_grad.h — the Node that ends every backward path at a leaf.
//
// A leaf tensor that requires grad (a parameter) gets one AccumulateGrad node,
// created the first time an op uses it and cached (weakly) in its
// AutogradMeta, so every use of the leaf within one graph feeds the same node.
// apply() adds the incoming gradient into `variable.grad()` (or sets it, the
// first time), then runs the tensor's post-accumulate-grad hooks (kept in its
// AutogradMeta) in registration order.
//
// § Note [Post-accumulate-grad hooks]
// A hook runs after the gradient for this backward has been fully summed into
// .grad: the Engine accumulates every contribution for a leaf in the node's
// input buffer before running the node, so the node, and so each hook, runs
// exactly once per parameter per backward. DDP's Reducer registers one hook per
// parameter; that is how it learns a gradient is ready (autograd_hook).
//
// Read before: autograd/node.h. Read next: autograd/accumulate_grad.cpp, autograd/engine.h.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "autograd/node.h"

namespace lockstep::autograd {

using PostAccumulateGradHook = std::function<void(Tensor&)>;

class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor variable);

  variable_list apply(variable_list&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }

  const Tensor& variable() const { return variable_; }

 private:
  Tensor variable_;
};

// The (cached) AccumulateGrad of a leaf that requires grad.
std::shared_ptr<AccumulateGrad> grad_accumulator(const Tensor& leaf);

// Returned by Tensor::register_post_accumulate_grad_hook; remove() unregisters.
class HookHandle {
 public:
  HookHandle() = default;
  HookHandle(std::weak_ptr<TensorImpl> tensor, uint64_t id) : tensor_(std::move(tensor)), id_(id) {}
  void remove();

 private:
  std::weak_ptr<TensorImpl> tensor_;
  uint64_t id_ = 0;
};

}  // namespace lockstep::autograd
