// nn/group_norm.h — GroupNorm: normalises each example over groups of channels
// (torch.nn.GroupNorm(num_groups, num_channels, eps, affine)).
//
// input (N, C, *) with C = num_channels, G = num_groups dividing C:
//   x viewed as (N, G, C / G * prod(*)); each row normalised with its own mean
//   and biased variance: (x - mean) / sqrt(var + eps)
//   then per channel: y = x_hat * weight (C) + bias (C)   (ones and zeros at init)
// No running statistics: train() and eval() compute the same thing. Built from
// differentiable ops (group_norm below), so autograd differentiates it; under
// bf16 autocast it computes in float32 and returns float32 (PyTorch's autocast
// lists group_norm among the float32 ops).
// Read before: nn/layer_norm.h. Read next: nn/conv_transpose.h.
#pragma once

#include "nn/unary_module.h"

namespace lockstep::nn {

// The functional form; weight and bias (C) may be undefined.
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

struct GroupNorm : UnaryModule {
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);

  std::string type_name() const override { return "GroupNorm"; }
  bool runs_forward_pre_hooks() const override { return true; }  // Note [Forward pre-hooks]
  LS_NOT_A_HOLDER(GroupNorm)
  Tensor forward(const Tensor& input) override;  // (N, C, *) -> (N, C, *)

  int64_t num_groups, num_channels;
  double eps;
  Tensor weight;  // (C), undefined without affine
  Tensor bias;    // (C)
};

}  // namespace lockstep::nn
