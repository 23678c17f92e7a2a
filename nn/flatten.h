// nn/flatten.h — Flatten: merges dims start_dim..end_dim into one, (N, C, H, W)
// -> (N, C*H*W) by default (start_dim = 1 keeps the batch dim), as torch.nn.Flatten.
// Read before: nn/unary_module.h. Read next: nn/sequential.h.
#pragma once

#include "nn/unary_module.h"

namespace lockstep::nn {

struct Flatten : UnaryModule {
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : start_dim(start_dim), end_dim(end_dim) {}

  std::string type_name() const override { return "Flatten"; }
  Tensor forward(const Tensor& input) override { return input.flatten(start_dim, end_dim); }

  int64_t start_dim, end_dim;
};

}  // namespace lockstep::nn
