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
// § Note [Gradient sinks]
// A leaf may have one gradient sink, set by the code that owns where its
// gradient goes next (DDP's Reducer: the parameter's bucket slot). While .grad is
// undefined, AccumulateGrad offers the sink the incoming gradient before doing
// anything with it; the sink either places it (copies it, converting a bf16
// gradient of a float32 leaf in the same pass, where its owner wants it) and
// returns the tensor that becomes .grad, or returns an undefined tensor to decline,
// and AccumulateGrad goes on as without a sink. The post-accumulate-grad hooks run
// after either way. What saves: the pass that would write the gradient into a
// tensor of its own (the dtype conversion, or the owner's later copy) and reading
// it back. A sink may return a tensor whose values are the incoming ones times a
// factor only its owner knows (DDP's 1/world), so it must decline whenever anyone
// else could look: its owner checks post_accumulate_grad_hook_count.
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

// Note [Gradient sinks]: `sink(incoming)` returns the new .grad, or undefined to
// decline. set_grad_sink returns false (and sets nothing) when the leaf already has
// one; clear_grad_sink removes whatever is set.
using GradSink = std::function<Tensor(const Tensor& incoming)>;
bool set_grad_sink(const Tensor& leaf, GradSink sink);
void clear_grad_sink(const Tensor& leaf);
// How many post-accumulate-grad hooks the leaf has (a sink's owner counts its own).
size_t post_accumulate_grad_hook_count(const Tensor& leaf);

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
