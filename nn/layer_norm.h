// nn/layer_norm.h — LayerNorm: normalises over the trailing dims.
//
// LayerNorm({D}) (or LayerNorm(D)) normalises each (*, D) row to zero mean and
// unit variance (biased), then scales by weight and shifts by bias (both of
// shape normalized_shape; ones and zeros at start), as torch.nn.LayerNorm.
// Read before: nn/batch_norm.h. Read next: nn/embedding.h.
#pragma once

#include "nn/unary_module.h"

namespace lockstep::nn {

struct LayerNorm : UnaryModule {
  explicit LayerNorm(IntList normalized_shape, double eps = 1e-5);
  explicit LayerNorm(int64_t normalized_size, double eps = 1e-5)
      : LayerNorm(IntList{normalized_size}, eps) {}

  std::string type_name() const override { return "LayerNorm"; }
  bool runs_forward_pre_hooks() const override { return true; }  // Note [Forward pre-hooks]
  LS_NOT_A_HOLDER(LayerNorm)
  Tensor forward(const Tensor& input) override;  // (*, normalized_shape) -> same

  IntList normalized_shape;
  double eps;
  Tensor weight, bias;  // normalized_shape
};

}  // namespace lockstep::nn
