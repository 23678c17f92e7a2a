// autograd/node.cpp — sequence numbers and gradient edges.
// Read before: autograd/node.h.
#include "autograd/node.h"

#include "autograd/accumulate_grad.h"

namespace lockstep::autograd {

namespace {
thread_local uint64_t next_sequence_nr = 0;
}

Node::Node() : sequence_nr_(next_sequence_nr++) {}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  if (const auto& fn = t.grad_fn()) return {fn, t.output_nr()};
  if (t.requires_grad()) return {grad_accumulator(t), 0};
  return {};
}

}  // namespace lockstep::autograd
