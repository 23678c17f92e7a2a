// nn/functional_module.h — nn::Functional: a function as a module, for Sequential
// (libtorch's torch::nn::Functional).
//
//   seq->push_back("relu", std::make_shared<ls::nn::Functional>(ls::relu));
//   seq->push_back("pool", std::make_shared<ls::nn::Functional>(
//       [](const ls::Tensor& x) { return ls::max_pool2d(x, 2); }));
//
// It has no parameters; the function is called as is in train() and eval().
// Read before: nn/unary_module.h. Read next: nn/sequential.h.
#pragma once

#include <functional>
#include <utility>

#include "nn/unary_module.h"

namespace lockstep::nn {

struct Functional : UnaryModule {
  explicit Functional(std::function<Tensor(const Tensor&)> fn) : fn(std::move(fn)) {
    LS_CHECK(this->fn != nullptr, "Functional: the function is empty");
  }
  std::string type_name() const override { return "Functional"; }
  LS_NOT_A_HOLDER(Functional)
  Tensor forward(const Tensor& input) override { return fn(input); }

  std::function<Tensor(const Tensor&)> fn;
};

}  // namespace lockstep::nn
