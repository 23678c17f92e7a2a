// autograd/function.h — recording an op on the tape.
//
// A differentiable op (see autograd/functions/) computes its result with a
// native kernel, then, if compute_requires_grad() says so, creates its backward
// Node, saves what backward needs, and calls record():
//
//   Tensor out = native::unary(UnaryOp::Exp, x);
//   if (compute_requires_grad({x})) {
//     auto node = std::make_shared<ExpBackward>();
//     node->result = SavedVariable(out);
//     record(node, {x}, {out});
//   }
//
// Read before: autograd/node.h, autograd/saved_variable.h. Read next:
// autograd/accumulate_grad.h, autograd/engine.h.
#pragma once

#include <memory>
#include <vector>

#include "autograd/node.h"
#include "autograd/saved_variable.h"
#include "core/grad_mode.h"

namespace lockstep::autograd {

// True when grad mode is on and at least one (defined) input requires grad.
// Every op calls it with all of its inputs, so it also refuses an input still
// being written (Note [Reads of a tensor still being written], write_in_flight.h).
bool compute_requires_grad(const std::vector<Tensor>& inputs);

// Wires `node` into the tape: its next edges are the gradient edges of
// `inputs` (in order), and it becomes the grad_fn of each output (output_nr =
// position), which then requires grad.
void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
            const std::vector<Tensor>& outputs);

}  // namespace lockstep::autograd
