// autograd/grad.h — autograd::grad: the gradients of outputs with respect to
// chosen inputs, returned instead of accumulated (libtorch's torch::autograd::grad).
//
//   auto dx = ls::autograd::grad({y}, {x})[0];                 // y has one element
//   auto g = ls::autograd::grad({out}, {x}, {ls::ones_like(out)},
//                               /*retain_graph=*/{}, /*create_graph=*/true)[0];
//   auto penalty = ((g * g).sum(1).sqrt() - 1.0).pow(2).mean();  // backpropagates into D
//
// result[i] = sum over j of grad_outputs[j]^T d outputs[j] / d inputs[i], the same
// vector-Jacobian product backward() computes, but no tensor's .grad() changes
// and no post-accumulate-grad hook runs: only the nodes on a path from the
// outputs to the inputs run (Note [Capturing gradients] in autograd/engine.h).
//   grad_outputs   one per output; empty, or an undefined entry, means ones for
//                  a one-element output (any other output needs one);
//   retain_graph   keep the saved tensors for another backward; defaults to
//                  create_graph, as in PyTorch;
//   create_graph   record the backward itself, so the results can be
//                  differentiated again (Note [Double backward] in
//                  autograd/double_backward.h lists the ops that support it);
//   allow_unused   an input no output depends on gets an undefined tensor
//                  instead of an error.
// Every input must require grad (a leaf with requires_grad, or the result of an
// op on one); the results have the inputs' shapes and dtypes.
//
// Read before: autograd/engine.h. Read next: autograd/double_backward.h.
#pragma once

#include <optional>
#include <vector>

#include "autograd/node.h"

namespace lockstep::autograd {

variable_list grad(const variable_list& outputs, const variable_list& inputs,
                   const variable_list& grad_outputs = {},
                   std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                   bool allow_unused = false);

}  // namespace lockstep::autograd
