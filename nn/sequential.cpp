// nn/sequential.cpp — Sequential's registration and forward.
// Read before: nn/sequential.h.
#include "nn/sequential.h"

namespace lockstep::nn {

Sequential::Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> modules) {
  for (const auto& m : modules) push_back(m);
}

void Sequential::append(const std::string& name, std::shared_ptr<UnaryModule> module) {
  add_child(name, module);  // checks the name and null
  modules_.push_back(std::move(module));
}

const std::shared_ptr<UnaryModule>& Sequential::operator[](size_t index) const {
  LS_CHECK(index < modules_.size(), "Sequential[", index, "]: index out of range for a Sequential "
           "of ", modules_.size(), " modules");
  return modules_[index];
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& m : modules_) x = m->forward(x);
  return x;
}

}  // namespace lockstep::nn
