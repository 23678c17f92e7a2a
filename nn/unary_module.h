// nn/unary_module.h — UnaryModule: a Module whose forward takes one tensor.
//
// Module::forward is not virtual (see nn/module.h): each module declares the
// signature it needs, e.g. MultiheadAttention::forward(x, key_padding_mask).
// Containers that call their children generically (Sequential) need one
// common signature, so the single-input layers (Linear, Conv2d, BatchNorm2d,
// LayerNorm, Embedding, Dropout, ReLU, GELU, MaxPool2d, AdaptiveAvgPool2d,
// Flatten, Sequential itself) derive from UnaryModule and override
//   Tensor forward(const Tensor& x)
// A user module that should go into a Sequential derives from it too:
//   struct Block : ls::nn::UnaryModule {
//     ls::Tensor forward(const ls::Tensor& x) override { ... }
//   };
// Calling forward through a concrete pointer (linear->forward(x)) is an
// ordinary call; only Sequential pays for the virtual dispatch.
// Read before: nn/module.h. Read next: nn/sequential.h.
#pragma once

#include "nn/module.h"

namespace lockstep::nn {

class UnaryModule : public Module {
 public:
  virtual Tensor forward(const Tensor& input) = 0;
  // Lets a module be called like a function: (*layer)(x).
  Tensor operator()(const Tensor& input) { return forward(input); }
};

}  // namespace lockstep::nn
