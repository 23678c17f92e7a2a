// autograd/node.h — a step of the backward pass, and the edges between steps.
//
// Every differentiable op that runs with grad mode on and an input requiring
// grad creates a Node (e.g. MulBackward) and makes it the grad_fn of its
// outputs. `next_edges()[i]` says where the gradient for the op's i-th input
// goes: the grad_fn of that input (and which of its outputs it was), or the
// input's AccumulateGrad if it is a leaf, or nowhere (an invalid edge) if the
// input does not require grad. The nodes and edges form the tape: a DAG that
// the Engine walks from the loss back to the leaves.
//
// § Note [Sequence numbers]
// Each Node takes the next value of a thread-local counter when created, so a
// node created later in forward has a larger number. The Engine runs ready
// nodes largest-first: backward visits ops in reverse forward order whenever
// the dependencies allow, which makes gradient-ready order deterministic (DDP
// relies on that order being the same on every rank). AccumulateGrad nodes get
// the largest possible number, so a leaf's gradient is accumulated (and its
// hooks fire) as soon as it is ready.
//
// Read before: core/tensor.h, core/autograd_meta.h. Read next: autograd/saved_variable.h,
// autograd/function.h, autograd/engine.h.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace lockstep::autograd {

class Node;
using variable_list = std::vector<Tensor>;

struct Edge {
  std::shared_ptr<Node> function;  // null: the input needs no gradient
  uint32_t input_nr = 0;           // which gradient input of `function` receives it
  bool is_valid() const { return function != nullptr; }
};

// Shape, dtype and device of one forward output, so the Engine can fill in zeros
// when an output of a multi-output op received no gradient.
struct OutputMeta {
  IntList sizes;
  ScalarType dtype = kFloat32;
  Device device = Device::cpu();
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  static constexpr uint64_t kMaxSequenceNr = std::numeric_limits<uint64_t>::max();

  Node();  // takes the next sequence number; see Note [Sequence numbers]
  explicit Node(uint64_t sequence_nr) : sequence_nr_(sequence_nr) {}
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Gradients w.r.t. the forward outputs in, gradients w.r.t. the forward inputs
  // out (one per next edge; undefined where no gradient flows).
  virtual variable_list apply(variable_list&& grad_outputs) = 0;
  virtual std::string name() const = 0;
  // Frees saved tensors after a backward without retain_graph.
  virtual void release_variables() {}
  // Whether apply() builds its gradients from recording ops when grad mode is on,
  // so a backward with create_graph can be differentiated again through this node
  // (Note [Double backward] in autograd/double_backward.h).
  virtual bool supports_double_backward() const { return false; }

  // Note [Gradients summed in place] (autograd/engine.cpp): a node may add the
  // gradient for its i-th input into the one already waiting where edge i leads,
  // instead of returning a new tensor for the engine to add. Nodes that can do
  // that cheaper than a separate sum answer true for that i, and the engine then
  // calls apply_summing with pending[i] set to the waiting gradient when nobody
  // else can see it (undefined otherwise, and for every other i).
  virtual bool sums_into_pending(size_t /*input*/) const { return false; }
  // Like apply(), but gradient i of the result is pending[i] + this node's own,
  // where pending[i] is defined (written into pending[i] or not, as the node
  // likes). The default runs apply() and adds.
  virtual variable_list apply_summing(variable_list&& grad_outputs, variable_list&& pending);

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  void set_next_edges(std::vector<Edge> edges) { next_edges_ = std::move(edges); }
  uint64_t sequence_nr() const { return sequence_nr_; }
  const std::vector<OutputMeta>& output_meta() const { return output_meta_; }
  void add_output_meta(const Tensor& output) {
    output_meta_.push_back({output.sizes(), output.dtype(), output.device()});
  }
  size_t num_outputs() const { return output_meta_.size(); }

 private:
  std::vector<Edge> next_edges_;
  std::vector<OutputMeta> output_meta_;
  uint64_t sequence_nr_;
};

// Where the gradient for `t` should be sent: its grad_fn, its (lazily created)
// AccumulateGrad if it is a leaf that requires grad, or an invalid edge.
Edge gradient_edge(const Tensor& t);

}  // namespace lockstep::autograd
