// autograd/function.cpp — wiring a new Node into the tape.
// Read before: autograd/function.h.
#include "autograd/function.h"

#include "autograd/traffic.h"
#include "autograd/write_in_flight.h"
#include "core/autograd_meta.h"

namespace lockstep::autograd {

bool compute_requires_grad(const std::vector<Tensor>& inputs) {
  check_no_write_in_flight(inputs);  // Note [Reads of a tensor still being written]
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs) {
    if (t.requires_grad()) return true;
  }
  return false;
}

void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
            const std::vector<Tensor>& outputs) {
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Tensor& t : inputs) edges.push_back(gradient_edge(t));
  node->set_next_edges(std::move(edges));
  count_op_bytes(inputs, outputs);  // Note [Profiler bytes]
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    if (!out.defined()) continue;
    if (!out.impl()->autograd_meta) out.impl()->autograd_meta = std::make_unique<AutogradMeta>();
    AutogradMeta& meta = *out.impl()->autograd_meta;
    meta.requires_grad = true;
    meta.grad_fn = node;
    meta.output_nr = static_cast<uint32_t>(i);
    node->add_output_meta(out);
  }
}

}  // namespace lockstep::autograd
