// autograd/functions/functions.h — what every backward formula in this folder shares.
//
// The files beside this header define the differentiable ops declared in
// core/tensor.h (see Note [Where ops live] there), one op family per file:
//   elementwise.cpp  a + b, a - b, a * b, a / b (tensor or scalar), -a, where, maximum, minimum
//   unary.cpp        neg, relu, gelu, exp, log, tanh, sigmoid, sqrt, rsqrt, abs, pow
//   reduce.cpp       sum, mean, max, min (all elements or along a dim)
//   softmax.cpp      softmax, log_softmax
//   linalg.cpp       matmul (1-d, 2-d, batched, broadcast), bmm
//   shape.cpp        contiguous, clone, to, reshape, view, transpose, t, permute,
//                    (un)squeeze, flatten, expand
//   indexing.cpp     narrow, select, index_select, cat, stack
//   conv.cpp, pool.cpp, batch_norm.cpp   the nn layers' ops (see their own headers)
//   add_relu.cpp     relu(a + b) fused (the residual add of ResNet blocks)
//   linear_map.cpp, norm_recorded.cpp, conv_recorded.h   the double-backward
//                    formulas shared by several nodes (Note [Linear backward formulas])
// Each op runs a native kernel (core/native/native.h) and, if an input requires
// grad, records a Node named like PyTorch's (MulBackward, SumBackward, ...)
// whose apply() is the op's backward formula, itself written with native
// kernels; the nodes that support double backward write theirs with the ops of
// grad_ops.h, which record in a backward with create_graph (Note [Double
// backward] in autograd/double_backward.h). The pattern is the one in
// autograd/function.h.
//
// § Note [Gradient of a broadcast input]
// When an op broadcasts an input of shape (3) against one of shape (2, 3), the
// input's value was used once per row, so its gradient is the sum of the
// output gradient over the rows: native::sum_to(grad, input_shape). And when
// an op promotes dtypes (f32 * f64 computes in f64), the gradient comes back in
// the output's dtype and is converted to the input's. reduce_to() does both.
//
// § Note [Gradients returned by nodes]
// Like PyTorch's, a node may return a gradient that aliases its incoming
// gradient or another returned gradient (AddBackward returns `grad` twice; view
// ops return a view of `grad`) or that is a stride-0 expanded view (SumBackward
// expands a scalar). Whoever receives a gradient must therefore not write into
// it: the Engine sums gradients out of place and AccumulateGrad stores a copy
// when it would otherwise keep someone else's memory.
//
// Read before: autograd/function.h. Read next: autograd/functions/elementwise.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/double_backward.h"
#include "autograd/function.h"
#include "autograd/functions/grad_ops.h"
#include "core/native/native.h"

namespace lockstep::autograd {

// Shape and dtype of a forward input: what most formulas need to know about an
// input without keeping its data alive.
struct InputMeta {
  IntList sizes;
  ScalarType dtype = kFloat32;

  InputMeta() = default;
  explicit InputMeta(const Tensor& t) : sizes(t.sizes()), dtype(t.dtype()) {}
};

// Base of every node here: adds PyTorch's should_compute_output(i), true when
// the forward input i wants a gradient (its edge leads somewhere), so formulas
// skip work for inputs that are constants.
class BackwardNode : public Node {
 public:
  bool should_compute_output(size_t input_nr) const {
    return input_nr < next_edges().size() && next_edges()[input_nr].is_valid();
  }
};

// Base of the nodes whose formulas are written with grad_ops.h, so a backward
// with create_graph records them (Note [Double backward]).
class DoubleBackwardNode : public BackwardNode {
 public:
  bool supports_double_backward() const override { return true; }
};

// `log_probs`, saved without history by a node whose forward took log_softmax
// of the logits behind `logits` along `dim`, as the output of a LogSoftmaxBackward
// node leading there: a recorded formula that uses it is differentiated into the
// logits (CrossEntropyBackward's double backward). Grad mode on only; softmax.cpp.
Tensor log_softmax_of_saved(const Tensor& log_probs, int64_t dim, const Edge& logits);

// The gradient for `input` from a gradient of the (broadcast, promoted) output;
// see Note [Gradient of a broadcast input].
// Recorded in a backward with create_graph (autograd/functions/grad_ops.h).
inline Tensor reduce_to(const Tensor& grad, const InputMeta& input) {
  Tensor g = grad.sizes() == input.sizes ? grad : grad_ops::sum_to(grad, input.sizes);
  return grad_ops::to_dtype(g, input.dtype);
}

// A bool mask as 0/1 values of `dtype`, for formulas that multiply by a mask.
inline Tensor mask_to(const Tensor& mask, ScalarType dtype) { return native::to_dtype(mask, dtype); }

// A 0-d zero of `dtype`, which native::where broadcasts to any shape.
inline Tensor zero_scalar(ScalarType dtype, Device device = Device::cpu()) {
  return native::zeros({}, dtype, device);
}

}  // namespace lockstep::autograd
