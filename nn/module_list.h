// nn/module_list.h — ModuleList: an indexed list of submodules ("0", "1", ...),
// for stacks whose forward is not a simple chain (e.g. transformer layers that
// take a mask), like torch.nn.ModuleList.
// Read before: nn/module.h. Read next: models/bert.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"

namespace lockstep::nn {

template <class M>
class ModuleList : public Module {
 public:
  std::string type_name() const override { return "ModuleList"; }
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    items_.push_back(register_module(std::to_string(items_.size()), std::move(module)));
    return items_.back();
  }
  size_t size() const { return items_.size(); }
  const std::shared_ptr<M>& operator[](size_t i) const { return items_.at(i); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

}  // namespace lockstep::nn
