// autograd/engine.h — runs the backward pass.
//
// backward(roots, grads):
//   1. find every node reachable from the roots and count, for each, how many
//      edges point at it (its dependencies);
//   2. put the roots' nodes, with their seed gradients, on a ready queue
//      ordered by sequence number (see Note [Sequence numbers] in node.h);
//   3. pop a node, call apply() with its summed input gradients, add each
//      returned gradient into the input buffer of the edge's target, and queue
//      targets whose dependency count reaches zero; unless retain_graph, the
//      node frees its saved tensors right after its apply() (release_variables),
//      so activations go as soon as backward has used them, not at the end;
//   4. at the end, run the callbacks queued with queue_callback() (DDP waits
//      for its AllReduces there).
// Everything runs on the calling thread.
//
// § Note [Reentrant backward]
// A node's apply() may itself call backward() (autograd/checkpoint.h re-runs
// a function with grad enabled and backpropagates through the recomputation):
// the nested call is an independent backward with its own dependencies and
// ready queue, and returns before the outer node does. Only callbacks differ:
// queue_callback() from inside a nested backward (a DDP gradient hook fired by
// the recomputation) queues on the OUTERMOST backward, so "when the backward
// finishes" means the user's backward, not a checkpoint's inner one.
// Read before: autograd/accumulate_grad.h. Read next: autograd/grad.h, autograd/graph_traversal.h;
// on README's DDP track, distributed/process_group/process_group.h.
#pragma once

#include <functional>
#include <vector>

#include "autograd/node.h"

namespace lockstep::autograd {

// grads[i] seeds roots[i]; an undefined grad means ones (only for one-element roots).
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads = {},
              bool retain_graph = false);

// What one run of the engine does besides backward()'s default.
struct RunOptions {
  bool retain_graph = false;
  // Run the formulas with grad mode on, so the gradients are recorded (Note
  // [Double backward] in autograd/double_backward.h).
  bool create_graph = false;
  // § Note [Capturing gradients]
  // When not empty, the engine captures instead of accumulating, as
  // autograd::grad (autograd/grad.h) needs: it runs only the nodes that lie on
  // a path from the roots to one of these edges, returns the gradient that
  // arrives at each edge (summed over every path, undefined where none arrives),
  // and runs no node an edge leads to unless that node lies on the way to
  // another edge. A leaf's edge leads to its AccumulateGrad, which then never
  // runs, so no .grad changes and no gradient hook fires.
  std::vector<Edge> capture;
};

// The engine itself; backward() is run({roots}, {grads}, {retain_graph}).
// Returns one gradient per options.capture edge (nothing without capture).
variable_list run(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  const RunOptions& options);

// Runs fn once when the current backward finishes (after every node ran, before
// backward() returns; the outermost backward when nested, see Note [Reentrant
// backward]). Throws if no backward is running on this thread.
void queue_callback(std::function<void()> fn);

// True while this thread is inside backward().
bool in_backward();

}  // namespace lockstep::autograd
