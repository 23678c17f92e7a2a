// nn/layer_norm.cpp — LayerNorm's construction and forward.
// Read before: nn/layer_norm.h.
#include "nn/layer_norm.h"

#include "core/factory.h"
#include "core/nn_ops.h"
#include "core/shape.h"

namespace lockstep::nn {

LayerNorm::LayerNorm(IntList normalized_shape_in, double eps)
    : normalized_shape(std::move(normalized_shape_in)), eps(eps) {
  LS_CHECK(!normalized_shape.empty(), "LayerNorm: normalized_shape must have at least one dim");
  for (int64_t s : normalized_shape)
    LS_CHECK(s > 0, "LayerNorm: normalized_shape must be positive but got ",
             shape_str(normalized_shape));
  LS_CHECK(eps > 0.0, "LayerNorm: eps must be positive but got ", eps);
  weight = register_parameter("weight", ones(normalized_shape));
  bias = register_parameter("bias", zeros(normalized_shape));
}

Tensor LayerNorm::forward(const Tensor& input) {
  run_forward_pre_hooks();  // Note [Forward pre-hooks], nn/module.h
  const auto n = static_cast<int64_t>(normalized_shape.size());
  bool ok = input.defined() && input.dim() >= n;
  for (int64_t i = 0; ok && i < n; ++i) ok = input.size(input.dim() - n + i) == normalized_shape[i];
  LS_CHECK(ok, "LayerNorm(", shape_str(normalized_shape), ").forward: expected input (*, ",
           shape_str(normalized_shape), ") but got ",
           input.defined() ? input.shape_str() : "an undefined tensor");
  return layer_norm(input, normalized_shape, weight, bias, eps);
}

}  // namespace lockstep::nn
