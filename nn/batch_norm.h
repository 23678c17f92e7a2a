// nn/batch_norm.h — BatchNorm2d: per-channel normalisation of (N, C, H, W).
//
// Parameters weight (C, ones) and bias (C, zeros); buffers running_mean (C,
// zeros), running_var (C, ones) and num_batches_tracked (int64, 0-d), all with
// PyTorch's names and order, so state dicts line up with torchvision's.
// Training: normalises with the batch statistics and updates the running ones
// in place (running = (1 - momentum) * running + momentum * batch, with the
// unbiased batch variance), and counts the batch. Eval: uses the running
// statistics. DDP broadcasts these buffers from rank 0 before each forward.
// Read before: nn/conv.h. Read next: nn/layer_norm.h.
#pragma once

#include "nn/unary_module.h"

namespace lockstep::nn {

struct BatchNorm2d : UnaryModule {
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1);

  std::string type_name() const override { return "BatchNorm2d"; }
  Tensor forward(const Tensor& input) override;  // (N, C, H, W) -> (N, C, H, W)

  int64_t num_features;
  double eps, momentum;
  Tensor weight, bias;                                     // (C)
  Tensor running_mean, running_var, num_batches_tracked;  // (C), (C), () int64
};

}  // namespace lockstep::nn
