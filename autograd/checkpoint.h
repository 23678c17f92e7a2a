// autograd/checkpoint.h — activation checkpointing: trade compute for memory.
//
//   Tensor h = autograd::checkpoint([&](const std::vector<Tensor>& in) {
//     return block->forward(in[0]);          // (B, C) -> (B, C)
//   }, {x});
//
// checkpoint(fn, inputs) runs fn(inputs) WITHOUT recording (no intermediate
// activation of fn is kept) and records one CheckpointBackward node whose
// inputs are `inputs`. When backward reaches it, the node re-runs fn on
// detached copies of the inputs with grad enabled and backpropagates the
// incoming gradient through that recomputation with a nested backward() call
// (Note [Reentrant backward] in autograd/engine.h): the parameters fn uses get
// their gradients accumulated — and their post-accumulate-grad hooks fire —
// inside the nested backward, and the node returns the inputs' gradients.
// In a backward with create_graph (autograd::grad) the recomputation keeps the
// inputs' history instead and no .grad changes, so the gradients can be
// differentiated again (Note [Checkpoint under create_graph] in checkpoint.cpp).
//
// § Note [Checkpoint and gradient hooks]
// Each checkpoint call has its own nested backward, so a parameter used by two
// checkpointed calls (a block applied twice) is accumulated, and its hooks
// fire, once per call: twice in one user backward, not once as Note
// [Post-accumulate-grad hooks] promises for ordinary graphs. DDP's Reducer
// refuses that unless DDPOptions().static_graph(true) says how many times to
// expect (Note [Static graph] in distributed/ddp/reducer_static_graph.cpp). Also, the graph
// after forward does not show the parameters fn uses (they were not recorded),
// which is why graph traversal (find_unused_parameters) cannot see them.
//
// Rules: fn must compute the same thing when re-run: no random ops (the RNG
// state is not restored), no dependence on state that changes between forward
// and backward. Inputs must not be modified in place before backward (the
// saved-version check says so). fn returns one Tensor.
// Read before: autograd/engine.h, autograd/function.h. Read next: distributed/ddp/reducer.h.
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"

namespace lockstep::autograd {

using CheckpointFunction = std::function<Tensor(const std::vector<Tensor>&)>;

// fn(inputs), recorded as one node that recomputes fn in backward. With grad
// mode off it is simply fn(inputs).
Tensor checkpoint(CheckpointFunction fn, std::vector<Tensor> inputs);

}  // namespace lockstep::autograd
