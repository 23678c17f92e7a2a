// autograd/double_backward.h — differentiating a gradient again.
//
// § Note [Double backward]
// autograd::grad(..., create_graph=true) returns gradients that are themselves
// in a graph, so a gradient penalty such as ((||dD(x)/dx|| - 1)^2).mean() can be
// backpropagated into D's parameters (WGAN-GP, pytorch/examples cpp/autograd).
// Three pieces make that work:
//   1. the engine runs a node's formula with grad mode on, instead of under
//      NoGradGuard, when the backward has create_graph and the node says
//      supports_double_backward(); its formula is written with the ops of
//      autograd/functions/grad_ops.h, which then record (and stay the plain
//      native kernels in every other backward), or, when it is linear in the
//      incoming gradient with constant coefficients (pooling, indexing), run as a
//      linear map (Note [Linear backward formulas] in autograd/functions/linear_map.h);
//   2. a saved forward input that required grad comes back from unpack() with
//      its history (Note [Saved tensors keep their history]), and a saved
//      forward output comes back from saved_result() below as an output of the
//      node itself, so y = tanh(x), dx = g (1 - y^2) is differentiated through
//      y back into x;
//   3. every other node runs its native formula as before, and the engine then
//      gives each gradient it returned a DoubleBackwardNotImplemented grad_fn
//      whose edges lead where the node's forward inputs and incoming gradients
//      lead: a second backward that reaches it throws, naming the node and the
//      ops that do support double backward. A second-order gradient is never a
//      silent zero. A first-order gradient computed with create_graph through
//      such a node is still exact.
// The engine sums gradients with recording adds in such a backward, and the
// in-place sums of Note [Gradients summed in place] are off there.
// CheckpointBackward, which runs a nested backward, records in its own way (Note
// [Checkpoint under create_graph] in autograd/checkpoint.cpp), the fused LSTM and
// GRU layers (and cuDNN's) re-run their composed reference the same way (Note
// [Double backward by recomputation] in autograd/recompute_backward.h), and
// SyncBatchNormBackward sums over the process group with a differentiable
// AllReduce (Note [SyncBatchNorm double backward] in
// distributed/ddp/sync_batch_norm_recorded.h); linear under bf16 autocast re-runs
// a float32 linear on its saved bf16 copies the same way. The nodes that still
// refuse: the bf16 autocast nodes of conv2d, linear's fused GELU (+ dropout) forms,
// cross_entropy reading bf16 and dropout + add + layer_norm.
// Tests: tests/autograd/test_double_backward.cpp (gradgradcheck of the core ops,
// a gradient penalty end to end, the errors), test_double_backward_nn.cpp (the nn
// ops), test_double_backward_fused.cpp (scatter, the fused batch norms,
// checkpoint, bf16 conversions, dropout_add), test_double_backward_penalty.cpp
// (WGAN-GP through a conv critic), tests/distributed/test_sync_batch_norm_double_backward.cpp.
//
// Read before: autograd/engine.h, autograd/saved_variable.h.
// Read next: autograd/functions/grad_ops.h, autograd/grad.h.
#pragma once

#include <string>

#include "autograd/node.h"
#include "autograd/saved_variable.h"

namespace lockstep::autograd {

// The nodes whose formulas record under create_graph, for the error message
// and docs/api.md: "AddBackward, SubBackward, ...".
const std::string& double_backward_ops();

// A node's saved forward output (its output 0). Under grad mode (a backward
// with create_graph) it is returned as that output again, with `node` as its
// grad_fn, so a formula using it is differentiated through the node; otherwise
// it is the plain saved data.
Tensor saved_result(const SavedVariable& saved, Node& node);

// Step 3 of Note [Double backward]: gives each defined gradient in `grads`
// (what `node` returned for the incoming `grad_outputs`) a grad_fn that throws
// when differentiated, if anything it depends on requires grad.
void forbid_double_backward(const Node& node, const variable_list& grad_outputs,
                            variable_list& grads);

}  // namespace lockstep::autograd
