// autograd/graph_traversal.cpp — listing the leaves reachable from outputs.
// Read before: autograd/graph_traversal.h.
#include "autograd/graph_traversal.h"

#include <unordered_set>

namespace lockstep::autograd {

std::vector<std::shared_ptr<AccumulateGrad>> reachable_accumulators(
    const std::vector<Tensor>& outputs) {
  std::vector<std::shared_ptr<AccumulateGrad>> found;
  std::vector<std::shared_ptr<Node>> stack;
  std::unordered_set<Node*> seen;
  for (const Tensor& t : outputs) {
    Edge e = gradient_edge(t);
    if (e.is_valid() && seen.insert(e.function.get()).second) stack.push_back(e.function);
  }
  while (!stack.empty()) {
    std::shared_ptr<Node> node = std::move(stack.back());
    stack.pop_back();
    if (auto acc = std::dynamic_pointer_cast<AccumulateGrad>(node)) found.push_back(acc);
    for (const Edge& next : node->next_edges()) {
      if (next.is_valid() && seen.insert(next.function.get()).second) stack.push_back(next.function);
    }
  }
  return found;
}

}  // namespace lockstep::autograd
