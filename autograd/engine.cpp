// autograd/engine.cpp — the backward pass (see the steps in autograd/engine.h).
// Read before: autograd/engine.h.
#include "autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/grad_mode.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "autograd/double_backward.h"
#include "autograd/traffic.h"
#include "core/profiler.h"

namespace lockstep::autograd {

namespace {

// The state of one backward() call.
struct GraphTask {
  std::unordered_map<Node*, int> dependencies;           // edges not yet delivered
  std::unordered_map<Node*, variable_list> input_buffers;  // summed incoming gradients
  std::vector<std::function<void()>> callbacks;          // queue_callback()
  GraphTask* outer = nullptr;  // the backward this one runs inside (Note [Reentrant backward])
  bool create_graph = false;   // Note [Double backward]
  // Note [Capturing gradients]: the nodes to run (every node when not capturing).
  bool capturing = false;
  std::unordered_set<Node*> needed;
};

thread_local GraphTask* current_task = nullptr;

// Ready nodes, largest sequence number first; ties in arrival order.
struct ReadyQueue {
  struct Entry {
    uint64_t sequence_nr;
    uint64_t arrival;
    std::shared_ptr<Node> node;
    bool operator<(const Entry& o) const {
      if (sequence_nr != o.sequence_nr) return sequence_nr < o.sequence_nr;
      return arrival > o.arrival;
    }
  };
  std::priority_queue<Entry> heap;
  uint64_t arrivals = 0;
  void push(std::shared_ptr<Node> n) { heap.push({n->sequence_nr(), arrivals++, std::move(n)}); }
  std::shared_ptr<Node> pop() {
    auto n = heap.top().node;
    heap.pop();
    return n;
  }
};

// Whether nothing but `t` can see its memory: one handle, one view on its
// storage, dense (contiguous or channels-last) from offset 0, not part of a graph. Such a tensor may be
// overwritten without anyone noticing.
bool is_sole_owner(const Tensor& t) {
  return t.defined() && t.impl_ptr().use_count() == 1 && t.impl()->storage.use_count() == 1 &&
         t.storage_offset() == 0 && native::is_dense(t) && !t.requires_grad();
}

// Whether dst += other may replace dst + other: dst is unseen by anyone else
// and the sum has dst's shape, dtype and device.
bool can_sum_into(const Tensor& dst, const Tensor& other) {
  return is_sole_owner(dst) && dst.sizes() == other.sizes() && dst.dtype() == other.dtype() &&
         dst.device() == other.device();
}

// § Note [Gradients summed in place]
// A node whose output fed several ops receives one gradient per use, and the
// engine sums them in its input buffer. ResNet's residual blocks do this once
// per block on activation-sized tensors (up to 25 MB at batch 8), and a fresh
// a + b costs a new buffer plus a write into memory that is not in cache, a
// visible share of a ResNet50 step. So the sum is written into one of the two
// tensors when nothing else can see it (is_sole_owner: one handle, one view of
// its storage, no autograd history): the buffer's own slot, or else the
// arriving gradient. A backward function that hands one tensor to two edges
// (AddBackward), a view of a gradient, or the caller's seed gradient is
// shared, and then the sum is a new tensor as before. It halved the summing
// time of a ResNet50 step and lowered its peak memory (the numbers and how to
// re-measure them: docs/results/cpu_step.md, session 5);
// tests/autograd/test_engine_accumulate.cpp.
// A node can go further (Node::sums_into_pending): before it runs, take_pending
// hands it the gradient already waiting where its edge leads, if nobody else
// sees it, and the node returns its own gradient added into that tensor; a
// convolution does the addition inside its GEMM (Note [Convolution gradients
// summed in place] in core/native/fast/conv_onednn.h), so ResNet50's residual sums
// cost no separate pass at all; under bf16 autocast the stride-1 1x1 layers do the
// same in their GEMM (Note [bf16 convolution gradients summed in place] in
// core/native/conv_bf16.h). Dense means contiguous or channels-last here.
//
// Adds `grad` into slot `input_nr` of `node`'s input buffer.
void accumulate_input(GraphTask& task, Node* node, uint32_t input_nr, Tensor grad) {
  variable_list& buffer = task.input_buffers[node];
  size_t slots = std::max<size_t>(node->num_outputs(), 1);
  if (buffer.size() < slots) buffer.resize(slots);
  LS_CHECK(input_nr < buffer.size(), "backward: ", node->name(), " received a gradient for input ",
           input_nr, " but has only ", buffer.size());
  Tensor& slot = buffer[input_nr];
  if (!slot.defined()) {
    slot = std::move(grad);
    return;
  }
  profiler::Scope prof("autograd.accumulate");  // Note [Gradients summed in place]
  profiler::add_bytes(3 * distinct_bytes(grad));    // two read, one written: Note [Profiler bytes]
  if (task.create_graph && (slot.requires_grad() || grad.requires_grad())) {
    slot = slot + grad;  // recorded: Note [Double backward]
  } else if (can_sum_into(slot, grad)) {
    native::binary_(native::BinaryOp::Add, slot, grad);
  } else if (can_sum_into(grad, slot)) {
    native::binary_(native::BinaryOp::Add, grad, slot);
    slot = std::move(grad);
  } else {
    slot = native::add(slot, grad);
  }
}

// The gradients waiting where `node`'s edges lead that `node` may add into
// (Node::sums_into_pending, Note [Gradients summed in place]), taken out of
// their buffers; empty when there are none.
variable_list take_pending(GraphTask& task, const Node& node) {
  variable_list pending;
  const auto& edges = node.next_edges();
  for (size_t i = 0; i < edges.size(); ++i) {
    if (!edges[i].is_valid() || !node.sums_into_pending(i)) continue;
    auto it = task.input_buffers.find(edges[i].function.get());
    if (it == task.input_buffers.end() || edges[i].input_nr >= it->second.size()) continue;
    Tensor& slot = it->second[edges[i].input_nr];
    if (!is_sole_owner(slot)) continue;
    pending.resize(edges.size());
    pending[i] = std::move(slot);
    slot = Tensor();
  }
  return pending;
}

// Counts, for every node reachable from the roots, the edges that point at it.
void compute_dependencies(GraphTask& task, const std::vector<Edge>& roots) {
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  for (const Edge& e : roots) {
    if (seen.insert(e.function.get()).second) stack.push_back(e.function.get());
  }
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& next : node->next_edges()) {
      if (!next.is_valid()) continue;
      ++task.dependencies[next.function.get()];
      if (seen.insert(next.function.get()).second) stack.push_back(next.function.get());
    }
  }
}

// Note [Capturing gradients]: marks every node from which a path of edges
// leads to a capture target (a node some capture edge points at).
void compute_needed(GraphTask& task, const std::vector<Edge>& roots,
                    const std::vector<Edge>& capture) {
  std::unordered_set<Node*> targets;
  for (const Edge& e : capture) targets.insert(e.function.get());
  // Iterative post-order: a node is decided after all of its next nodes.
  std::unordered_map<Node*, bool> done;  // node -> needed
  std::vector<std::pair<Node*, bool>> stack;  // (node, children pushed)
  for (const Edge& e : roots) stack.emplace_back(e.function.get(), false);
  while (!stack.empty()) {
    auto [node, expanded] = stack.back();
    if (done.count(node)) {
      stack.pop_back();
      continue;
    }
    if (!expanded) {
      stack.back().second = true;
      for (const Edge& next : node->next_edges()) {
        if (next.is_valid() && !done.count(next.function.get())) {
          stack.emplace_back(next.function.get(), false);
        }
      }
      continue;
    }
    stack.pop_back();
    bool needed = false;
    for (const Edge& next : node->next_edges()) {
      if (!next.is_valid()) continue;
      Node* n = next.function.get();
      needed = needed || targets.count(n) > 0 || done[n];
    }
    done[node] = needed;
    if (needed) task.needed.insert(node);
  }
}

// Fills slots that got no gradient with zeros of the forward output's shape.
void fill_missing(Node& node, variable_list& buffer) {
  const auto& metas = node.output_meta();
  for (size_t i = 0; i < buffer.size() && i < metas.size(); ++i) {
    if (!buffer[i].defined()) buffer[i] = native::zeros(metas[i].sizes, metas[i].dtype, metas[i].device);
  }
}

// Runs `node`'s formula. Note [Double backward]: in a backward with create_graph
// a node that supports it runs with grad mode on; any other runs as always and
// its gradients get a grad_fn that refuses a second backward.
variable_list run_node(GraphTask& task, Node& node, variable_list&& inputs) {
  if (!task.create_graph) {
    variable_list pending = take_pending(task, node);
    return pending.empty() ? node.apply(std::move(inputs))
                           : node.apply_summing(std::move(inputs), std::move(pending));
  }
  if (node.supports_double_backward()) return node.apply(std::move(inputs));
  variable_list grad_outputs = inputs;
  variable_list grads;
  {
    NoGradGuard no_grad;
    grads = node.apply(std::move(inputs));
  }
  forbid_double_backward(node, grad_outputs, grads);
  return grads;
}

Tensor seed_gradient(const Tensor& root, const Tensor& grad) {
  if (grad.defined()) {
    LS_CHECK(grad.sizes() == root.sizes(), "backward: gradient of shape ", grad.shape_str(),
             " does not match the output's shape ", root.shape_str());
    return grad;
  }
  LS_CHECK(root.numel() == 1, "backward: grad can be implicitly created only for outputs with one "
           "element, but the output has shape ", root.shape_str(),
           "; reduce it first (e.g. .sum() or .mean()) or pass a gradient of that shape");
  Tensor ones = native::empty(root.sizes(), root.dtype(), root.device());
  native::fill_(ones, 1.0);
  return ones;
}

// Restores the enclosing backward's task (backward may nest inside a hook).
struct TaskScope {
  GraphTask* previous;
  explicit TaskScope(GraphTask* task) : previous(current_task) { current_task = task; }
  ~TaskScope() { current_task = previous; }
};

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph) {
  RunOptions options;
  options.retain_graph = retain_graph;
  run(roots, grads, options);
}

variable_list run(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  const RunOptions& options) {
  profiler::Scope prof("autograd.backward");  // nodes' scopes nest inside: see core/profiler.h
  LS_CHECK(grads.empty() || grads.size() == roots.size(), "backward: got ", grads.size(),
           " gradients for ", roots.size(), " outputs");
  const bool retain_graph = options.retain_graph;
  GraphTask task;
  task.outer = current_task;
  task.create_graph = options.create_graph;
  task.capturing = !options.capture.empty();
  std::vector<Edge> root_edges;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    detail::check_defined(root, "backward");
    Edge edge = gradient_edge(root);
    LS_CHECK(edge.is_valid(), "backward: the output of shape ", root.shape_str(),
             " does not require grad and has no grad_fn; make sure a parameter has "
             "requires_grad set and that the loss was not computed under NoGradGuard");
    accumulate_input(task, edge.function.get(), edge.input_nr,
                     seed_gradient(root, grads.empty() ? Tensor() : grads[i]));
    root_edges.push_back(std::move(edge));
  }
  compute_dependencies(task, root_edges);
  if (task.capturing) compute_needed(task, root_edges, options.capture);
  variable_list captured(options.capture.size());

  TaskScope scope(&task);
  // Backward formulas are not themselves recorded, unless create_graph (Note [Double backward]).
  AutoGradMode grad_mode(task.create_graph);
  ReadyQueue ready;
  std::unordered_set<Node*> queued;
  for (const Edge& e : root_edges) {
    if (task.dependencies[e.function.get()] == 0 && queued.insert(e.function.get()).second) {
      ready.push(e.function);
    }
  }
  while (!ready.heap.empty()) {
    std::shared_ptr<Node> node = ready.pop();
    variable_list inputs = std::move(task.input_buffers[node.get()]);
    task.input_buffers.erase(node.get());
    if (task.capturing) {  // Note [Capturing gradients]
      for (size_t c = 0; c < options.capture.size(); ++c) {
        const Edge& e = options.capture[c];
        if (e.function == node && e.input_nr < inputs.size()) captured[c] = inputs[e.input_nr];
      }
      if (!task.needed.count(node.get())) continue;
    }
    fill_missing(*node, inputs);
    variable_list outputs;
    {
      // name() builds a string: only while profiling or tracing (Note [Profiler cost when disabled]).
      const std::string prof_name = profiler::is_recording() ? node->name() : std::string();
      profiler::Scope node_prof(prof_name);
      NodeTraffic traffic(inputs);  // Note [Profiler bytes]
      outputs = run_node(task, *node, std::move(inputs));
      traffic.finish(outputs);
    }
    if (!retain_graph) node->release_variables();
    const auto& edges = node->next_edges();
    LS_CHECK(outputs.size() == edges.size() || edges.empty(), "backward: ", node->name(),
             " returned ", outputs.size(), " gradients for ", edges.size(), " inputs");
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& edge = edges[i];
      if (!edge.is_valid()) continue;
      if (outputs[i].defined()) {
        accumulate_input(task, edge.function.get(), edge.input_nr, std::move(outputs[i]));
      }
      if (--task.dependencies[edge.function.get()] == 0) ready.push(edge.function);
    }
  }
  // Callbacks may queue further callbacks; run until none are left.
  for (size_t i = 0; i < task.callbacks.size(); ++i) {
    auto fn = std::move(task.callbacks[i]);
    fn();
  }
  return captured;
}

void queue_callback(std::function<void()> fn) {
  LS_CHECK(current_task != nullptr, "queue_callback: can only be called during a backward pass "
                                    "(e.g. from a post-accumulate-grad hook)");
  // Note [Reentrant backward]: a nested backward's callbacks belong to the outermost one.
  GraphTask* task = current_task;
  while (task->outer != nullptr) task = task->outer;
  task->callbacks.push_back(std::move(fn));
}

bool in_backward() { return current_task != nullptr; }

}  // namespace lockstep::autograd

namespace lockstep {

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::backward({*this}, {grad}, retain_graph);
}

}  // namespace lockstep
