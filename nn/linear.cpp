// nn/linear.cpp — Linear's construction and forward.
// Read before: nn/linear.h.
#include "nn/linear.h"

#include <cmath>

#include "core/factory.h"
#include "core/nn_ops.h"
#include "nn/init.h"

namespace lockstep::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias)
    : in_features(in_features), out_features(out_features) {
  LS_CHECK(in_features > 0 && out_features > 0, "Linear: in_features and out_features must be "
           "positive but got Linear(", in_features, ", ", out_features, ")");
  // See Note [Kaiming init of Linear and Conv].
  weight = register_parameter("weight", empty({out_features, in_features}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    this->bias = register_parameter("bias", empty({out_features}));
    init::uniform_(this->bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& input) {
  run_forward_pre_hooks();  // Note [Forward pre-hooks], nn/module.h
  LS_CHECK(input.defined() && input.dim() >= 1 && input.size(-1) == in_features,
           "Linear(", in_features, ", ", out_features, ").forward: expected input (*, ",
           in_features, ") but got ", input.defined() ? input.shape_str() : "an undefined tensor");
  return linear(input, weight, bias);
}

}  // namespace lockstep::nn
