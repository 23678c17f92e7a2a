// nn/module_holder.h — ModuleHolder and LS_MODULE: libtorch's module holders.
//
// libtorch programs define a module as NetImpl and declare `TORCH_MODULE(Net)`,
// which makes Net a copyable handle to a shared NetImpl. lockstep spells the
// macro LS_MODULE; the rest is libtorch's:
//   struct NetImpl : ls::nn::Module {
//     NetImpl(int64_t hidden) { fc = register_module("fc", std::make_shared<ls::nn::Linear>(4, hidden)); }
//     ls::Tensor forward(const ls::Tensor& x) { return fc->forward(x); }
//     std::shared_ptr<ls::nn::Linear> fc;
//   };
//   LS_MODULE(Net);
//
//   Net net(16);                 // constructs a NetImpl(16)
//   net->forward(x); net(x);     // -> reaches the module; () calls forward
//   Net copy = net;              // the same module, not a new one
//   Net empty{nullptr};          // holds nothing yet (assign one later)
//   child = register_module("child", Net(8));   // inside another module
//
// A holder converts to std::shared_ptr<NetImpl> (and to std::shared_ptr<Module>),
// so it goes wherever a module pointer goes: DistributedDataParallel, ls::save.
// lockstep's built-in layers (nn::Linear, nn::Conv2d, ...) are the module
// classes themselves, held by std::shared_ptr; docs/api.md "Coming from
// libtorch" says why, and ModuleHolder<nn::Linear> is a holder of one.
//
// Read before: nn/module.h. Read next: nn/linear.h.
#pragma once

#include <concepts>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "nn/module.h"

namespace lockstep::nn {

template <class Impl>
class ModuleHolder {
  static_assert(std::is_base_of_v<Module, Impl>, "ModuleHolder<Impl>: Impl must derive from ls::nn::Module");

 public:
  using ContainedType = Impl;

  // Default: a default-constructed Impl, as libtorch's holders do.
  ModuleHolder()
    requires std::default_initializable<Impl>
      : impl_(std::make_shared<Impl>()) {}
  // Empty: `Net net{nullptr};` (the member is assigned in the constructor).
  ModuleHolder(std::nullptr_t) {}
  // Takes an existing module (e.g. register_module's result).
  ModuleHolder(std::shared_ptr<Impl> module) : impl_(std::move(module)) {}
  // Constructs Impl(args...).
  template <class Head, class... Tail>
    requires(!std::is_same_v<std::remove_cvref_t<Head>, std::nullptr_t> &&
             !std::is_convertible_v<Head, std::shared_ptr<Impl>> &&
             !std::is_base_of_v<ModuleHolder, std::remove_cvref_t<Head>> &&
             std::constructible_from<Impl, Head, Tail...>)
  explicit ModuleHolder(Head&& head, Tail&&... tail)
      : impl_(std::make_shared<Impl>(std::forward<Head>(head), std::forward<Tail>(tail)...)) {}

  Impl* operator->() const { return &checked(); }
  Impl& operator*() const { return checked(); }
  Impl* get() const { return impl_.get(); }
  const std::shared_ptr<Impl>& ptr() const { return impl_; }
  bool is_empty() const { return impl_ == nullptr; }
  explicit operator bool() const { return impl_ != nullptr; }

  // A module pointer of any base type: std::shared_ptr<Impl>, std::shared_ptr<Module>.
  template <class T>
    requires std::is_convertible_v<std::shared_ptr<Impl>, std::shared_ptr<T>>
  operator std::shared_ptr<T>() const {
    return impl_;
  }

  // net(x) is net->forward(x).
  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    return checked().forward(std::forward<Args>(args)...);
  }

 private:
  Impl& checked() const {
    LS_CHECK(impl_ != nullptr, "ModuleHolder: the holder is empty (constructed from nullptr); "
             "assign it a module first, e.g. `fc = register_module(\"fc\", Net(...))` in the constructor");
    return *impl_;
  }

  std::shared_ptr<Impl> impl_;
};

}  // namespace lockstep::nn

// LS_MODULE(Net): declares `class Net`, a ModuleHolder of the NetImpl defined before it
// (libtorch's TORCH_MODULE).
#define LS_MODULE(Name)                                                \
  class Name : public ::lockstep::nn::ModuleHolder<Name##Impl> {       \
   public:                                                             \
    using ::lockstep::nn::ModuleHolder<Name##Impl>::ModuleHolder;      \
  }
