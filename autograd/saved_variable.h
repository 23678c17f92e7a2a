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
// Read before: autograd/node.h. Read next: autograd/function.h.
#pragma once

#include <string>

#include "core/tensor.h"

namespace lockstep::autograd {

class SavedVariable {
 public:
  SavedVariable() = default;
  explicit SavedVariable(const Tensor& t);

  // The saved tensor; `op` names the node in the errors described above.
  Tensor unpack(const std::string& op) const;
  void reset();  // release the data

 private:
  Tensor data_;
  uint64_t saved_version_ = 0;
  bool was_released_ = false;
};

}  // namespace lockstep::autograd
