// autograd/functions/linear_autocast_saved.h — what linear's autocast node keeps from its
// forward, shared by the CPU node (autocast_ops.cpp) and the CUDA one (autocast_ops_cuda.cpp).
//
// The node's inputs are the original tensors (Note [Autocast casts inside the
// op]); it saves only their bf16 copies, each when the other operand's gradient
// needs it (dX = G W reads W16, dW = G^T X reads X16), and the dtypes the
// gradients go back in.
//
// Read before: autograd/saved_variable.h. Read next: autograd/functions/autocast_ops.cpp.
#pragma once

#include "autograd/saved_variable.h"
#include "core/tensor.h"

namespace lockstep::autograd {

struct LinearAutocastSaved {
  SavedVariable input16, weight16;  // bf16 (*, in) and (out, in)
  ScalarType input_dtype = kFloat32, weight_dtype = kFloat32, bias_dtype = kFloat32;

  // Fills the fields from the forward's operands and their bf16 copies x16, w16.
  void save(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& x16,
            const Tensor& w16) {
    input_dtype = input.dtype();
    weight_dtype = weight.dtype();
    bias_dtype = bias.defined() ? bias.dtype() : kFloat32;
    if (weight.requires_grad()) input16 = SavedVariable(x16);
    if (input.requires_grad()) weight16 = SavedVariable(w16);
  }
  void reset_saved() {
    input16.reset();
    weight16.reset();
  }
};

}  // namespace lockstep::autograd
