// nn/group_norm.cpp — group_norm from differentiable ops, and the GroupNorm module.
// Read before: nn/group_norm.h.
#include "nn/group_norm.h"

#include "autograd/functions/autocast_ops.h"
#include "core/factory.h"

namespace lockstep::nn {

Tensor group_norm(const Tensor& input_in, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                  double eps) {
  const Tensor input = autograd::float_input(input_in);  // float32 under bf16 autocast
  LS_CHECK(input.defined() && input.dim() >= 2, "group_norm: expected input (N, C, *) but got ",
           input.defined() ? input.shape_str() : "an undefined tensor");
  const int64_t N = input.size(0), C = input.size(1);
  LS_CHECK(num_groups > 0 && C % num_groups == 0, "group_norm: num_groups (", num_groups,
           ") must be positive and divide the ", C, " channels of input ", input.shape_str());
  const Tensor x = input.reshape({N, num_groups, -1});                 // (N, G, C/G * prod(*))
  const Tensor mean = x.mean({2}, /*keepdim=*/true);                   // (N, G, 1)
  const Tensor centered = x - mean;
  const Tensor var = (centered * centered).mean({2}, /*keepdim=*/true);  // biased, as PyTorch
  Tensor y = (centered * (var + eps).rsqrt()).reshape(input.sizes());   // (N, C, *)
  IntList per_channel(static_cast<size_t>(input.dim()), 1);            // (1, C, 1, ...)
  per_channel[1] = C;
  if (weight.defined()) y = y * weight.reshape(per_channel);
  if (bias.defined()) y = y + bias.reshape(per_channel);
  return y;
}

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, double eps, bool affine)
    : num_groups(num_groups), num_channels(num_channels), eps(eps) {
  LS_CHECK(num_groups > 0 && num_channels > 0 && num_channels % num_groups == 0, "GroupNorm: num_groups (",
           num_groups, ") must be positive and divide num_channels (", num_channels, ")");
  if (affine) {
    weight = register_parameter("weight", ones({num_channels}));
    bias = register_parameter("bias", zeros({num_channels}));
  }
}

Tensor GroupNorm::forward(const Tensor& input) {
  run_forward_pre_hooks();  // Note [Forward pre-hooks], nn/module.h
  LS_CHECK(input.defined() && input.dim() >= 2 && input.size(1) == num_channels, "GroupNorm(", num_groups,
           ", ", num_channels, ").forward: expected input (N, ", num_channels, ", *) but got ",
           input.defined() ? input.shape_str() : "an undefined tensor");
  return group_norm(input, num_groups, weight, bias, eps);
}

}  // namespace lockstep::nn
