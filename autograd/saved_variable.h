// autograd/saved_variable.h — a tensor a backward formula needs, kept safely.
//
// § Note [Saved tensor versions]
// Backward formulas often need forward inputs or outputs (MulBackward needs
// both factors). Saving keeps a detached handle (data only: no grad_fn, so an
// op saving its own output creates no reference cycle) and the storage's
// version counter at save time. In-place ops bump that counter; if it changed
// by the time backward unpacks the tensor, the gradient would be silently
// wrong, so unpack() throws instead, naming the op. After a backward without
// retain_graph the Engine releases saved tensors; unpacking one then throws the
// "backward through the graph a second time" error.
//
// § Note [Saved tensors keep their history]
// A saved forward input that requires grad also keeps its original handle (its
// grad_fn, or its identity as a leaf), and unpack() returns that handle while
// grad mode is on: in a backward with create_graph the formula's use of the
// tensor is then recorded, so the gradient can be differentiated again
// (Note [Double backward] in autograd/double_backward.h). This holds
// nothing new alive: the input's grad_fn is already this node's next edge. The
// node's own output is saved before record() makes it require grad, so it keeps
// no handle (it would be a cycle: node -> output -> grad_fn = node); formulas
// that need it with history rebuild it (saved_result in that header).
//
// Read before: autograd/node.h. Read next: autograd/function.h.
#pragma once

#include <string>

#include "core/tensor.h"

namespace lockstep::autograd {

class SavedVariable {
 public:
  SavedVariable() = default;
  explicit SavedVariable(const Tensor& t);

  // The saved tensor; `op` names the node in the errors described above. Under
  // grad mode, the original handle when it has one (Note [Saved tensors keep
  // their history]); otherwise the data without history.
  Tensor unpack(const std::string& op) const;
  void reset();  // release the data

 private:
  Tensor data_;
  Tensor original_;  // defined when the saved tensor required grad
  uint64_t saved_version_ = 0;
  bool was_released_ = false;
};

}  // namespace lockstep::autograd
