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
// Modules are held by std::shared_ptr (no holder indirection):
//   struct Net : ls::nn::Module {
//     std::shared_ptr<ls::nn::Linear> fc;
//     Net() { fc = register_module("fc", std::make_shared<ls::nn::Linear>(4, 2)); }
//     ls::Tensor forward(const ls::Tensor& x) { return fc->forward(x); }
//   };
// forward() is not virtual: each module declares the signature it needs.
//
// Read before: autograd/engine.h. Read next: nn/linear.h, nn/state_dict.cpp, nn/serialize.h.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace lockstep::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
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

  // ---- access, depth-first in registration order ----
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  // This module and every descendant, depth-first, with dotted prefixes ("" for this one).
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules();

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

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> module);

 private:
  void collect(const std::string& prefix, bool recurse, bool want_params, NamedTensors& out) const;
  void check_new_name(const std::string& name, const char* what) const;

  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace lockstep::nn
