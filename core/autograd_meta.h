// core/autograd_meta.h — the per-tensor state autograd keeps.
//
// A tensor either is a leaf (grad_fn null; gradients accumulate into `grad`
// through its AccumulateGrad node) or was produced by an op (grad_fn is that
// op's backward Node and output_nr says which of its outputs this is). Hooks are
// kept here, on the tensor, so they outlive any one graph.
// Node is only forward-declared: core holds the pointer, autograd/ defines it.
// Read before: core/tensor.h. Read next: autograd/node.h.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace lockstep {

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;                                       // accumulated gradient (leaves)
  std::shared_ptr<autograd::Node> grad_fn;           // null for leaves
  uint32_t output_nr = 0;                            // which output of grad_fn
  std::weak_ptr<autograd::Node> grad_accumulator;    // leaves: cached AccumulateGrad
  // Leaves: run by AccumulateGrad after .grad is updated, in registration order
  // (see Note [Post-accumulate-grad hooks] in autograd/accumulate_grad.h).
  std::vector<std::pair<uint64_t, std::function<void(Tensor&)>>> post_accumulate_grad_hooks;
  uint64_t next_hook_id = 0;
  // Leaves: offered the incoming gradient while .grad is undefined (Note [Gradient
  // sinks] in autograd/accumulate_grad.h); empty: none.
  std::function<Tensor(const Tensor&)> grad_sink;
};

}  // namespace lockstep
