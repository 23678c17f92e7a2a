// nn/state_dict.cpp — Module::state_dict / load_state_dict.
//
// A state dict maps dotted names to tensors: every parameter and buffer.
// state_dict() returns detached handles sharing the module's storage (save them
// or clone them); load_state_dict() copies values into the existing tensors, so
// optimizers and DDP that hold parameter handles keep working after a load.
// Read before: nn/module.h. Read next: nn/serialize.h.
#include <sstream>

#include "core/grad_mode.h"
#include "nn/module.h"

namespace lockstep::nn {

StateDict Module::state_dict() const {
  run_state_dict_pre_hooks();  // Note [Forward pre-hooks]
  StateDict out;
  // Every name of a shared tensor, as PyTorch's (Note [Shared parameters]).
  for (const auto& [name, t] : named_parameters(true, false)) out[name] = t.detach();
  for (const auto& [name, t] : named_buffers(true, false)) out[name] = t.detach();
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  run_state_dict_pre_hooks();  // Note [Forward pre-hooks]
  NamedTensors targets = named_parameters(true, false);
  for (auto& entry : named_buffers(true, false)) targets.push_back(entry);

  std::vector<std::string> missing;
  std::vector<std::string> unexpected;
  for (const auto& [name, t] : targets) {
    if (!state.count(name)) missing.push_back(name);
  }
  for (const auto& [name, t] : state) {
    bool known = false;
    for (const auto& [target_name, target] : targets) known = known || target_name == name;
    if (!known) unexpected.push_back(name);
  }
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::ostringstream os;
    os << type_name() << ".load_state_dict: the state dict does not match the module.";
    auto list = [&](const char* what, const std::vector<std::string>& names) {
      if (names.empty()) return;
      os << ' ' << what << " keys (" << names.size() << "):";
      for (size_t i = 0; i < names.size() && i < 10; ++i) os << (i ? ", " : " ") << '"' << names[i] << '"';
      if (names.size() > 10) os << ", ...";
      os << '.';
    };
    list("Missing", missing);
    list("Unexpected", unexpected);
    os << " Pass strict=false to load the matching keys only.";
    throw Error(os.str());
  }
  NoGradGuard no_grad;
  for (auto& [name, target] : targets) {
    auto it = state.find(name);
    if (it == state.end()) continue;
    const Tensor& value = it->second;
    LS_CHECK(value.defined(), type_name(), ".load_state_dict: '", name, "' is an undefined tensor in the state "
             "dict (a default-constructed ls::Tensor); give it a value, or leave the key out with strict=false");
    LS_CHECK(value.sizes() == target.sizes(), type_name(), ".load_state_dict: '", name,
             "' has shape ", value.shape_str(), " in the state dict but ", target.shape_str(),
             " in the module");
    LS_CHECK(value.dtype() == target.dtype() ||
                 (value.is_floating_point() && target.is_floating_point()),
             type_name(), ".load_state_dict: '", name, "' has dtype ", value.dtype(),
             " in the state dict but ", target.dtype(), " in the module");
    target.copy_(value);
  }
}

}  // namespace lockstep::nn
