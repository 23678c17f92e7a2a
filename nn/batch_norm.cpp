// nn/batch_norm.cpp — BatchNorm2d's construction and forward.
// Read before: nn/batch_norm.h.
#include "nn/batch_norm.h"

#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/nn_ops.h"

namespace lockstep::nn {

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, double momentum)
    : num_features(num_features), eps(eps), momentum(momentum) {
  LS_CHECK(num_features > 0, "BatchNorm2d: num_features must be positive but got ", num_features);
  LS_CHECK(eps > 0.0, "BatchNorm2d: eps must be positive but got ", eps);
  LS_CHECK(momentum >= 0.0 && momentum <= 1.0, "BatchNorm2d: momentum must be in [0, 1] but got ",
           momentum);
  weight = register_parameter("weight", ones({num_features}));
  bias = register_parameter("bias", zeros({num_features}));
  running_mean = register_buffer("running_mean", zeros({num_features}));
  running_var = register_buffer("running_var", ones({num_features}));
  num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64));
}

Tensor BatchNorm2d::forward(const Tensor& input) {
  run_forward_pre_hooks();  // Note [Forward pre-hooks], nn/module.h
  LS_CHECK(input.defined() && input.dim() == 4 && input.size(1) == num_features, "BatchNorm2d(",
           num_features, ").forward: expected input (N, ", num_features, ", H, W) but got ",
           input.defined() ? input.shape_str() : "an undefined tensor");
  // See Note [BatchNorm group statistics].
  if (is_training() && group_statistics) return group_statistics->forward(*this, input);
  if (is_training()) {
    LS_CHECK(input.numel() / num_features > 1, "BatchNorm2d.forward: expected more than 1 value "
             "per channel when training but got input ", input.shape_str(),
             "; use a larger batch or call eval()");
    NoGradGuard no_grad;
    num_batches_tracked.add_(1.0);
  }
  return batch_norm(input, weight, bias, running_mean, running_var, is_training(), momentum, eps);
}

}  // namespace lockstep::nn
