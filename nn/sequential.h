// nn/sequential.h — Sequential: runs single-input modules one after another.
//
//   auto mlp = std::make_shared<ls::nn::Sequential>();
//   mlp->push_back("fc1", std::make_shared<ls::nn::Linear>(784, 128));
//   mlp->push_back(std::make_shared<ls::nn::ReLU>());         // named "1" (its index)
//   mlp->push_back("fc2", std::make_shared<ls::nn::Linear>(128, 10));
//   ls::Tensor y = mlp->forward(x);
//   auto net = std::make_shared<ls::nn::Sequential>(fc1, relu, fc2);  // named "0", "1", "2"
//
// Children are registered as submodules under their names, so parameters get
// dotted names like "fc1.weight" or "0.weight" (torch.nn.Sequential's). Any
// UnaryModule can be pushed, including another Sequential.
// Read before: nn/unary_module.h. Read next: nn/attention.h.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "nn/unary_module.h"

namespace lockstep::nn {

struct Sequential : UnaryModule {
  Sequential() = default;
  // Sequential({a, b, c}): children named "0", "1", "2".
  Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> modules);
  // libtorch's variadic form: Sequential(a, b, c), the same names.
  template <class... M>
    requires(sizeof...(M) >= 1 && (std::is_base_of_v<UnaryModule, M> && ...))
  explicit Sequential(std::shared_ptr<M>... modules)
      : Sequential({std::shared_ptr<UnaryModule>(std::move(modules))...}) {}

  // libtorch's Sequential(nn::Linear(3, 4), ...) passes module objects, not pointers.
  template <class... M>
    requires(sizeof...(M) >= 1 && (std::is_base_of_v<Module, std::remove_cvref_t<M>> && ...))
  explicit Sequential(M&&...) {
    static_assert((::lockstep::detail::always_false<M> && ...),
                  "lockstep: Sequential takes std::shared_ptr modules: "
                  "std::make_shared<ls::nn::Sequential>(std::make_shared<ls::nn::Linear>(3, 4), ...)");
  }

  std::string type_name() const override { return "Sequential"; }
  LS_NOT_A_HOLDER(Sequential)
  Tensor forward(const Tensor& input) override;  // children in order

  // Appends `module` under `name` and returns it (typed, to keep as a member).
  template <class M>
  std::shared_ptr<M> push_back(const std::string& name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<UnaryModule, M>,
                  "Sequential::push_back: the module must derive from ls::nn::UnaryModule "
                  "(see nn/unary_module.h)");
    append(name, module);
    return module;
  }
  // Appends `module` named by its index ("0", "1", ...).
  template <class M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    return push_back(std::to_string(modules_.size()), std::move(module));
  }

  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  const std::shared_ptr<UnaryModule>& operator[](size_t index) const;

 private:
  void append(const std::string& name, std::shared_ptr<UnaryModule> module);
  std::vector<std::shared_ptr<UnaryModule>> modules_;
};

}  // namespace lockstep::nn
