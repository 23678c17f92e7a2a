// nn/activation.h — ReLU and GELU as modules (no parameters), for Sequential.
// GELU is the exact erf form, PyTorch's default (approximate = "none").
// Read before: nn/unary_module.h. Read next: nn/pooling.h.
#pragma once

#include "nn/unary_module.h"

namespace lockstep::nn {

struct ReLU : UnaryModule {
  std::string type_name() const override { return "ReLU"; }
  Tensor forward(const Tensor& input) override { return input.relu(); }
};

struct GELU : UnaryModule {
  std::string type_name() const override { return "GELU"; }
  Tensor forward(const Tensor& input) override { return input.gelu(); }
};

}  // namespace lockstep::nn
