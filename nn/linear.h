// nn/linear.h — Linear: y = x W^T + b, the fully connected layer.
//
// weight (out_features, in_features) and bias (out_features), registered in
// that order under PyTorch's names; initialised as PyTorch does (see Note
// [Kaiming init of Linear and Conv] in nn/init.h). Input (*, in) -> (*, out).
// Read before: nn/unary_module.h, nn/init.h. Read next: nn/conv.h.
#pragma once

#include "nn/unary_module.h"

namespace lockstep::nn {

struct Linear : UnaryModule {
  Linear(int64_t in_features, int64_t out_features, bool bias = true);

  std::string type_name() const override { return "Linear"; }
  bool runs_forward_pre_hooks() const override { return true; }  // Note [Forward pre-hooks]
  LS_NOT_A_HOLDER(Linear)
  Tensor forward(const Tensor& input) override;  // (*, in) -> (*, out)

  int64_t in_features, out_features;
  Tensor weight;  // (out, in)
  Tensor bias;    // (out), undefined when constructed with bias = false
};

}  // namespace lockstep::nn
