// nn/activation.h — ReLU, GELU, LeakyReLU, Sigmoid and Tanh as modules (no
// parameters), for Sequential. GELU is the exact erf form, PyTorch's default
// (approximate = "none"). LeakyReLU(slope) is x where x > 0, else slope * x
// (its gradient at 0 is slope, as PyTorch's).
// Read before: nn/unary_module.h. Read next: nn/leaky_relu.cpp, nn/pooling.h.
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

// x where x > 0, else negative_slope * x (torch.nn.functional.leaky_relu). A
// float32 CPU tensor takes one fused op with one backward node (nn/leaky_relu.cpp);
// any other tensor takes leaky_relu_reference.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);

// The definition composed of recorded ops, for every dtype and device; the fused
// op is tested against it.
inline Tensor leaky_relu_reference(const Tensor& x, double negative_slope = 0.01) {
  return where(x.gt(0.0), x, x * negative_slope);
}

struct LeakyReLU : UnaryModule {
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  std::string type_name() const override { return "LeakyReLU"; }
  Tensor forward(const Tensor& input) override { return leaky_relu(input, negative_slope); }
  double negative_slope;
};

struct Sigmoid : UnaryModule {
  std::string type_name() const override { return "Sigmoid"; }
  Tensor forward(const Tensor& input) override { return input.sigmoid(); }
};

struct Tanh : UnaryModule {
  std::string type_name() const override { return "Tanh"; }
  Tensor forward(const Tensor& input) override { return input.tanh(); }
};

}  // namespace lockstep::nn
