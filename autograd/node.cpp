// autograd/node.cpp — sequence numbers and gradient edges.
// Read before: autograd/node.h.
#include "autograd/node.h"

#include "autograd/accumulate_grad.h"
#include "autograd/traffic.h"
#include "core/profiler.h"
#include "core/native/native.h"

namespace lockstep::autograd {

namespace {
thread_local uint64_t next_sequence_nr = 0;
}

Node::Node() : sequence_nr_(next_sequence_nr++) {}

variable_list Node::apply_summing(variable_list&& grad_outputs, variable_list&& pending) {
  variable_list grads = apply(std::move(grad_outputs));
  for (size_t i = 0; i < pending.size() && i < grads.size(); ++i) {
    if (!pending[i].defined()) continue;
    if (grads[i].defined()) {
      profiler::Scope prof("autograd.accumulate");  // the separate pass a summing node avoids
      profiler::add_bytes(3 * distinct_bytes(grads[i]));  // Note [Profiler bytes]
      native::binary_(native::BinaryOp::Add, pending[i], grads[i]);
    }
    grads[i] = std::move(pending[i]);
  }
  return grads;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  if (const auto& fn = t.grad_fn()) return {fn, t.output_nr()};
  if (t.requires_grad()) return {grad_accumulator(t), 0};
  return {};
}

}  // namespace lockstep::autograd
