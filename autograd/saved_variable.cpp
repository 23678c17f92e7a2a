// autograd/saved_variable.cpp — version-checked saved tensors.
// Read before: autograd/saved_variable.h.
#include "autograd/saved_variable.h"

#include "autograd/traffic.h"
#include "core/grad_mode.h"

namespace lockstep::autograd {

SavedVariable::SavedVariable(const Tensor& t) {
  if (!t.defined()) return;
  data_ = t.detach();
  if (t.requires_grad()) original_ = t;  // Note [Saved tensors keep their history]
  saved_version_ = t.impl()->storage->version();
}

Tensor SavedVariable::unpack(const std::string& op) const {
  LS_CHECK(!was_released_, op, ": trying to backward through the graph a second time (or to "
           "use saved tensors after they were freed). The saved tensors are freed after the "
           "first backward; pass retain_graph=true to the first backward() (or autograd::grad()) "
           "to keep them");
  if (!data_.defined()) return data_;
  uint64_t now = data_.impl()->storage->version();
  LS_CHECK(now == saved_version_, op, ": a tensor of shape ", data_.shape_str(),
           " that this op saved for backward was modified by an in-place operation (version ",
           saved_version_, " when saved, ", now,
           " now); use an out-of-place op, or .clone() the tensor before modifying it");
  profiler::add_bytes(distinct_bytes(data_));  // read by the backward: Note [Profiler bytes]
  return original_.defined() && GradMode::is_enabled() ? original_ : data_;
}

void SavedVariable::reset() {
  if (data_.defined() || !was_released_) {
    data_ = Tensor();
    original_ = Tensor();
    was_released_ = true;
  }
}

}  // namespace lockstep::autograd
