// nn/module.cpp — registration, recursive access (Note [Shared parameters]), train/eval,
// to(), zero_grad, hooks (Note [Forward pre-hooks]).
// Read before: nn/module.h.
#include "nn/module.h"

#include <algorithm>
#include <atomic>
#include <unordered_set>

#include "core/grad_mode.h"
#include "core/native/native.h"

namespace lockstep::nn {

void Module::check_new_name(const std::string& name, const char* what) const {
  LS_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name(), ": ", what,
           " name '", name, "' must be non-empty and contain no '.'");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e.first == name; });
  };
  LS_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), type_name(), ": ", what,
           " name '", name, "' is already registered in this module");
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_new_name(name, "parameter");
  detail::check_defined(tensor, "register_parameter");
  LS_CHECK(tensor.is_leaf(), type_name(), ": parameter '", name, "' must be a leaf tensor; "
           "pass .detach() of a computed value");
  if (requires_grad) tensor.requires_grad_(true);
  parameters_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_new_name(name, "buffer");
  detail::check_defined(tensor, "register_buffer");
  buffers_.emplace_back(name, tensor);
  return tensor;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "submodule");
  LS_CHECK(module != nullptr, type_name(), ": submodule '", name, "' is null");
  children_.emplace_back(name, std::move(module));
}

void Module::collect(const std::string& prefix, bool recurse, bool want_params,
                     NamedTensors& out) const {
  for (const auto& [name, t] : want_params ? parameters_ : buffers_) out.emplace_back(prefix + name, t);
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", true, want_params, out);
}

// Note [Shared parameters]: a tensor (one TensorImpl) is kept under its first name.
NamedTensors Module::named(bool recurse, bool want_params, bool remove_duplicate) const {
  NamedTensors all;
  collect("", recurse, want_params, all);
  if (!remove_duplicate) return all;
  NamedTensors out;
  out.reserve(all.size());
  std::unordered_set<const TensorImpl*> seen;
  for (auto& item : all) {
    if (seen.insert(item.second.impl()).second) out.push_back(std::move(item));
  }
  return out;
}

NamedTensors Module::named_parameters(bool recurse, bool remove_duplicate) const {
  return named(recurse, true, remove_duplicate);
}

NamedTensors Module::named_buffers(bool recurse, bool remove_duplicate) const {
  return named(recurse, false, remove_duplicate);
}

Tensor Module::replace_parameter(const std::string& name, Tensor tensor) {
  detail::check_defined(tensor, "replace_parameter");
  auto it = std::find_if(parameters_.begin(), parameters_.end(), [&](const auto& e) { return e.first == name; });
  LS_CHECK(it != parameters_.end(), type_name(), ".replace_parameter: no parameter '", name,
           "' in this module; register it first with register_parameter");
  LS_CHECK(tensor.sizes() == it->second.sizes(), type_name(), ".replace_parameter: '", name, "' has shape ",
           it->second.shape_str(), " but the replacement has ", tensor.shape_str(),
           "; a tied weight must have the shape of the one it replaces (transpose it first if needed)");
  LS_CHECK(tensor.is_leaf(), type_name(), ".replace_parameter: the replacement of '", name,
           "' must be a leaf tensor, e.g. another module's parameter");
  it->second = tensor;
  return tensor;
}

namespace {
std::vector<Tensor> values(const NamedTensors& named) {
  std::vector<Tensor> out;
  out.reserve(named.size());
  for (const auto& [name, t] : named) out.push_back(t);
  return out;
}
}  // namespace

std::vector<Tensor> Module::parameters(bool recurse) const { return values(named_parameters(recurse)); }
std::vector<Tensor> Module::buffers(bool recurse) const { return values(named_buffers(recurse)); }

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [name, child] : children_) out.push_back(child);
  return out;
}

NamedModules Module::named_children() const { return children_; }

NamedModules Module::named_modules() {
  NamedModules out;
  out.emplace_back("", shared_from_this());
  for (const auto& [name, child] : children_) {
    for (auto& [sub, m] : child->named_modules()) {
      out.emplace_back(sub.empty() ? name : name + "." + sub, m);
    }
  }
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

namespace {
// Replaces t's data by `replacement` in place, so every handle to t sees it.
void rebind(const Tensor& t, const Tensor& replacement) {
  TensorImpl* impl = t.impl();
  impl->storage = replacement.impl()->storage;
  impl->sizes = replacement.sizes();
  impl->strides = replacement.strides();
  impl->offset = replacement.storage_offset();
  impl->dtype = replacement.dtype();
}
}  // namespace

// Moves every parameter, buffer and gradient to `device` in place: each tensor
// keeps its identity (optimizers and DDP hold the same Parameter handles), only
// its storage changes, as in PyTorch's module.to(device).
void Module::to(Device device) {
  run_state_dict_pre_hooks();  // it reads every parameter (Note [Forward pre-hooks])
  NoGradGuard no_grad;
  auto move_all = [&](const NamedTensors& list) {
    for (const auto& [name, t] : list) {
      if (t.device() == device) continue;
      rebind(t, native::to_device(t, device));
      if (t.grad().defined()) {
        const_cast<Tensor&>(t).mutable_grad() = native::to_device(t.grad(), device);
      }
    }
  };
  move_all(named_parameters());
  move_all(named_buffers());
}

void Module::to(ScalarType dtype) {
  LS_CHECK(is_floating_point(dtype), type_name(), ".to: expected a floating point dtype, got ", dtype);
  run_state_dict_pre_hooks();
  NoGradGuard no_grad;
  auto convert_all = [&](const NamedTensors& list) {
    for (const auto& [name, t] : list) {
      if (!t.is_floating_point() || t.dtype() == dtype) continue;
      rebind(t, native::to_dtype(t, dtype));
      const_cast<Tensor&>(t).mutable_grad() = Tensor();
    }
  };
  convert_all(named_parameters());
  convert_all(named_buffers());
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (Tensor& p : parameters()) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.mutable_grad() = Tensor();
    } else {
      p.mutable_grad().zero_();
    }
  }
}

namespace {
std::atomic<Module::HookHandle> next_hook_handle{1};
}  // namespace

Module::HookHandle Module::register_forward_pre_hook(Hook hook) {
  LS_CHECK(hook != nullptr, type_name(), ".register_forward_pre_hook: the hook is empty");
  forward_pre_hooks_.emplace_back(next_hook_handle++, std::move(hook));
  return forward_pre_hooks_.back().first;
}

Module::HookHandle Module::register_state_dict_pre_hook(Hook hook) {
  LS_CHECK(hook != nullptr, type_name(), ".register_state_dict_pre_hook: the hook is empty");
  state_dict_pre_hooks_.emplace_back(next_hook_handle++, std::move(hook));
  return state_dict_pre_hooks_.back().first;
}

void Module::remove_hook(HookHandle handle) {
  for (auto* hooks : {&forward_pre_hooks_, &state_dict_pre_hooks_}) {
    std::erase_if(*hooks, [&](const auto& h) { return h.first == handle; });
  }
}

void Module::run_hooks(const std::vector<std::pair<HookHandle, Hook>>& hooks) const {
  const auto copy = hooks;  // a hook may remove itself
  for (const auto& [handle, hook] : copy) hook(*this);
}

void Module::run_state_dict_pre_hooks() const {
  if (!state_dict_pre_hooks_.empty()) run_hooks(state_dict_pre_hooks_);
  for (const auto& [name, child] : children_) child->run_state_dict_pre_hooks();
}

}  // namespace lockstep::nn
