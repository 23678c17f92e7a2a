// nn/dropout.h — Dropout: zeroes elements with probability p while training.
//
// Training: each element is zeroed with probability p (drawn from the default
// generator) and the survivors are scaled by 1 / (1 - p), so the expected value
// is unchanged. eval(): the identity. See lockstep::dropout in core/nn_ops.h.
// Dropout2d zeroes whole channels: for (N, C, H, W) (or (C, H, W)) one draw per
// (n, c) plane, the survivors scaled by 1 / (1 - p) (torch.nn.Dropout2d).
// Read before: nn/embedding.h. Read next: nn/activation.h.
#pragma once

#include "core/factory.h"
#include "core/nn_ops.h"
#include "nn/unary_module.h"

namespace lockstep::nn {

struct Dropout : UnaryModule {
  explicit Dropout(double p = 0.5) : p(p) {
    LS_CHECK(p >= 0.0 && p <= 1.0, "Dropout: p must be in [0, 1] but got ", p);
  }

  std::string type_name() const override { return "Dropout"; }
  LS_NOT_A_HOLDER(Dropout)
  Tensor forward(const Tensor& input) override { return dropout(input, p, is_training()); }

  double p;
};

struct Dropout2d : UnaryModule {
  explicit Dropout2d(double p = 0.5) : p(p) {
    LS_CHECK(p >= 0.0 && p <= 1.0, "Dropout2d: p must be in [0, 1] but got ", p);
  }

  std::string type_name() const override { return "Dropout2d"; }
  LS_NOT_A_HOLDER(Dropout2d)
  Tensor forward(const Tensor& input) override {
    LS_CHECK(input.defined() && (input.dim() == 3 || input.dim() == 4),
             "Dropout2d.forward: expected (N, C, H, W) or (C, H, W) but got ",
             input.defined() ? input.shape_str() : "an undefined tensor");
    if (!is_training() || p == 0.0) return input;
    // One draw per plane: dropout of a ones tensor (N, C, 1, 1) is the plane's factor, 0 or 1/(1-p).
    IntList plane = input.sizes();
    plane[plane.size() - 1] = plane[plane.size() - 2] = 1;
    const Tensor factor = dropout(ones(plane, TensorOptions().dtype(input.dtype()).device(input.device())),
                                  p, /*training=*/true);
    return input * factor;
  }

  double p;
};

}  // namespace lockstep::nn
