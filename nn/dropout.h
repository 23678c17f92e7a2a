// nn/dropout.h — Dropout: zeroes elements with probability p while training.
//
// Training: each element is zeroed with probability p (drawn from the default
// generator) and the survivors are scaled by 1 / (1 - p), so the expected value
// is unchanged. eval(): the identity. See lockstep::dropout in core/nn_ops.h.
// Read before: nn/embedding.h. Read next: nn/activation.h.
#pragma once

#include "core/nn_ops.h"
#include "nn/unary_module.h"

namespace lockstep::nn {

struct Dropout : UnaryModule {
  explicit Dropout(double p = 0.5) : p(p) {
    LS_CHECK(p >= 0.0 && p <= 1.0, "Dropout: p must be in [0, 1] but got ", p);
  }

  std::string type_name() const override { return "Dropout"; }
  Tensor forward(const Tensor& input) override { return dropout(input, p, is_training()); }

  double p;
};

}  // namespace lockstep::nn
