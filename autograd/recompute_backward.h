// autograd/recompute_backward.h — a gradient that can be differentiated again, from a
// fused node whose own formula cannot record: the node's reference composition re-run.
//
// § Note [Double backward by recomputation]
// A fused node (the CPU's fused LSTM and GRU layers) computes its gradients with
// native kernels that record nothing, so under create_graph (Note [Double backward]
// in autograd/double_backward.h) its formula alone would give gradients without
// history. Instead, in such a backward, the node re-runs its reference composition —
// the composed, recording ops that compute the same function (for the LSTM layer, the
// reference path of nn::LSTM) — on aliases of its saved inputs (their handles with
// history, each behind an identity node), and a nested engine run with create_graph
// captures what arrives at the aliases (Note [Capturing gradients] in
// autograd/engine.h). The gradients returned lead through the recomputed graph into
// the inputs' own history, so a second backward reaches them, and they equal the
// fused formula's up to the order of sums (the reference and the fused kernels do the
// same arithmetic). No .grad changes: the parameters are inputs of the node, captured
// like the rest. The recomputed graph is retained, as the recorded gradients reuse its
// saved tensors. It costs a forward and a backward of the reference, paid only in a
// backward with create_graph. autograd::checkpoint's recorded path is the same thing
// with the user's function as the reference (Note [Checkpoint under create_graph]).
// A node that saved only a converted copy of an input (linear under bf16 autocast keeps
// x's bf16 copy, not x) re-runs its reference on that copy joined to the input's edge
// (with_history below): the copy's gradient goes, converted back to the input's dtype,
// where the input's would have gone.
//
// Read before: autograd/double_backward.h, autograd/engine.h.
// Read next: autograd/checkpoint.cpp, nn/lstm_layer.cpp.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autograd/node.h"

namespace lockstep::autograd {

// The reference composition: outputs from inputs, recording (grad mode is on).
using ReferenceFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

// The gradients of `inputs` (the node's saved inputs, unpacked with their history;
// undefined ones allowed) for `grad_outputs` (one per output of `reference`, undefined
// where none arrived), recorded as the Note above says. Call it from a node's apply()
// while grad mode is on; `op` names the node in errors.
variable_list recorded_gradients(const std::string& op, const std::vector<Tensor>& inputs,
                                 const ReferenceFunction& reference, const variable_list& grad_outputs);

// An alias of `data` whose gradient is converted (recorded) to `grad_dtype` and sent
// along `edge` (a node's next edge: where its input's gradient goes); `data` itself
// when the edge is not valid (that input needs no gradient).
Tensor with_history(const Tensor& data, const Edge& edge, ScalarType grad_dtype);

}  // namespace lockstep::autograd
