// nn/module.h — Module: the base of every layer and model.
//
// A Module owns named parameters (tensors that require grad), named buffers
// (state that is not trained, e.g. BatchNorm's running statistics) and named
// child modules, each kept in registration order. parameters() and
// named_parameters() walk the tree depth-first in that order, giving dotted
// names ("layer1.0.conv1.weight"), as PyTorch does.
//
// § Note [Registration order]
// DDP buckets gradients in the REVERSE of parameters() order, on the bet that
// registration order roughly follows forward order, so gradients become ready
// in about reverse order during backward (paper, Section 3.2.3). Registering a
// model's pieces in the order forward uses them keeps that bet good.
//
// Modules are held by std::shared_ptr:
//   struct Net : ls::nn::Module {
//     std::shared_ptr<ls::nn::Linear> fc;
//     Net() { fc = register_module("fc", std::make_shared<ls::nn::Linear>(4, 2)); }
//     ls::Tensor forward(const ls::Tensor& x) { return fc->forward(x); }
//   };
// or, libtorch's way, by a holder that LS_MODULE(Net) declares for a NetImpl
// (nn/module_holder.h); register_module takes either and returns what it got.
// forward() is not virtual: each module declares the signature it needs.
//
// § Note [Shared parameters]
// One tensor may be registered in two modules (tied weights: a language model's
// embedding and output projection). parameters() and named_parameters() list it
// once, under the first name met depth-first, as PyTorch does, so an optimizer
// steps it once and DDP reduces one gradient for it. state_dict() keeps every
// name (PyTorch's too), so checkpoints load into an untied model. To tie, make
// the second module's registered parameter the first's tensor:
//   decoder->weight = decoder->replace_parameter("weight", encoder->weight);
// Assigning the member alone (decoder->weight = encoder->weight) leaves the old
// tensor registered: it would be stepped and reduced but never used.
//
// § Note [Forward pre-hooks]
// register_forward_pre_hook(hook) (PyTorch's) makes hook(module) run at the
// start of the module's forward(), before it reads its parameters; it returns
// a handle for remove_hook. forward() is not virtual here, so a layer runs its
// hooks itself: each built-in layer that owns parameters calls
// run_forward_pre_hooks() first in every forward, says so with
// runs_forward_pre_hooks(), and code that reads a layer's parameters without
// calling its forward (a fused path reading bn.weight) calls the layer's
// run_forward_pre_hooks() first. register_state_dict_pre_hook(hook) runs hook
// before state_dict(), load_state_dict() and to() read or write the parameters
// of this module (called on it or on any ancestor), and before anything else
// that reads every parameter outside a forward (DDP's replica check). Whoever needs
// the parameters to be final before they are used registers both: ZeRO's
// deferred broadcasts (Note [ZeRO broadcasts overlap the next forward],
// distributed/zero/zero_forward_waits.cpp). With no hook registered, the cost
// is one test of an empty list per forward.
//
// Read before: autograd/engine.h. Read next: nn/ordered_dict.h, nn/module_holder.h,
// nn/linear.h, nn/state_dict.cpp, nn/serialize.h.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/ordered_dict.h"

namespace lockstep::detail {
template <class T>
inline constexpr bool always_false = false;  // for static_asserts that name a lockstep spelling
}  // namespace lockstep::detail

namespace lockstep::nn {

class Module;
using NamedTensors = OrderedDict<Tensor>;
using NamedModules = OrderedDict<std::shared_ptr<Module>>;
// Parameters and buffers by dotted name; see nn/state_dict.h.
using StateDict = std::map<std::string, Tensor>;

class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The module's type name, for printing and errors ("Linear", "Conv2d", ...).
  virtual std::string type_name() const { return "Module"; }

  // ---- registration (call from constructors, in forward order) ----
  // Makes `tensor` a parameter (a leaf that requires grad); returns the handle
  // to keep as a member. The handle and the module share one TensorImpl.
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor tensor);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  // A holder (nn/module_holder.h: LS_MODULE, ModuleHolder): registers the module
  // it holds and returns the holder, so `conv = register_module("conv", conv)`
  // and `fc = register_module("fc", Net(...))` work as in libtorch.
  template <class Holder>
    requires requires(const Holder& h) { typename Holder::ContainedType; h.ptr(); }
  Holder register_module(const std::string& name, Holder holder) {
    add_child(name, holder.ptr());
    return holder;
  }
  // A module object (not a pointer): libtorch's `register_module("fc", fc)` on a
  // holder member. Built-in layers are held by std::shared_ptr here.
  template <class M>
    requires std::derived_from<std::remove_cvref_t<M>, Module>
  void register_module(const std::string&, M&&) {
    static_assert(::lockstep::detail::always_false<M>,
                  "lockstep: register_module takes a std::shared_ptr (std::make_shared<ls::nn::Linear>(...)) "
                  "or a holder (LS_MODULE(Net)); built-in layers are not holders");
  }
  // Replaces the registered parameter `name` by `tensor` and returns it, to keep
  // as the member (Note [Shared parameters]); the shapes must agree.
  Tensor replace_parameter(const std::string& name, Tensor tensor);

  // ---- access, depth-first in registration order ----
  // A tensor registered twice is listed once unless remove_duplicate is false
  // (Note [Shared parameters]).
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true, bool remove_duplicate = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true, bool remove_duplicate = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  NamedModules named_children() const;
  // This module and every descendant, depth-first, with dotted prefixes ("" for this one).
  NamedModules named_modules();

  // `module->...` on a module object (a libtorch holder habit) names the spelling.
  template <class T = void>
  Module* operator->() {
    static_assert(::lockstep::detail::always_false<T>,
                  "lockstep: built-in layers and Sequential are modules, not holders: hold them by "
                  "std::shared_ptr (auto seq = std::make_shared<ls::nn::Sequential>(...)) and use ->");
    return this;
  }

  // ---- mode and placement ----
  virtual void train(bool on = true);  // recursive; Dropout/BatchNorm read is_training()
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves (or converts) every parameter and buffer in place: handles held as
  // members stay valid. Gradients are dropped.
  void to(Device device);
  void to(ScalarType dtype);  // floating parameters/buffers only
  // Clears gradients: undefined (set_to_none, the default, like PyTorch 2) or zeroed.
  void zero_grad(bool set_to_none = true);

  // ---- state (nn/state_dict.cpp) ----
  StateDict state_dict() const;
  // Copies values into the existing tensors. strict: missing or unexpected keys
  // throw, naming them. A shape or dtype mismatch always throws.
  void load_state_dict(const StateDict& state, bool strict = true);

  // ---- hooks (Note [Forward pre-hooks]) ----
  using Hook = std::function<void(const Module&)>;
  using HookHandle = int64_t;
  HookHandle register_forward_pre_hook(Hook hook);
  HookHandle register_state_dict_pre_hook(Hook hook);
  void remove_hook(HookHandle handle);  // either kind; an unknown handle is ignored
  // Called first in forward() by a layer that owns parameters.
  void run_forward_pre_hooks() const {
    if (!forward_pre_hooks_.empty()) [[unlikely]] run_hooks(forward_pre_hooks_);
  }
  // This module's state-dict pre-hooks and every descendant's.
  void run_state_dict_pre_hooks() const;
  // Whether every forward() of this module runs its forward pre-hooks (the
  // built-in layers that own parameters); a user module that calls
  // run_forward_pre_hooks() first in its forward may override it too.
  virtual bool runs_forward_pre_hooks() const { return false; }

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> module);

 private:
  void collect(const std::string& prefix, bool recurse, bool want_params, NamedTensors& out) const;
  NamedTensors named(bool recurse, bool want_params, bool remove_duplicate) const;
  void check_new_name(const std::string& name, const char* what) const;
  void run_hooks(const std::vector<std::pair<HookHandle, Hook>>& hooks) const;

  NamedTensors parameters_;
  NamedTensors buffers_;
  NamedModules children_;
  bool training_ = true;
  std::vector<std::pair<HookHandle, Hook>> forward_pre_hooks_;
  std::vector<std::pair<HookHandle, Hook>> state_dict_pre_hooks_;
};

}  // namespace lockstep::nn

// In a built-in layer: `ls::nn::Linear fc{nullptr};` (libtorch's empty holder)
// fails with a message naming lockstep's spelling.
#define LS_NOT_A_HOLDER(Name)                                                                     \
  template <class T = void>                                                                       \
  explicit Name(std::nullptr_t) {                                                                          \
    static_assert(::lockstep::detail::always_false<T>,                                        \
                  "lockstep: nn::" #Name " is a module, not a holder: declare std::shared_ptr<ls::nn::" \
                  #Name "> and assign register_module(name, std::make_shared<ls::nn::" #Name ">(...))"); \
  }

// libtorch's TORCH_MODULE(Net) is LS_MODULE(Net) here (nn/module_holder.h).
#ifndef TORCH_MODULE
#define TORCH_MODULE(Name) \
  static_assert(::lockstep::detail::always_false<Name##Impl>, "lockstep: write LS_MODULE(" #Name ")")
#endif
