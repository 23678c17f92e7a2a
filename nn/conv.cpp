// nn/conv.cpp — Conv2d's construction (checks, PyTorch init) and forward.
// Read before: nn/conv.h.
#include "nn/conv.h"

#include <cmath>

#include "core/factory.h"
#include "core/nn_ops.h"
#include "nn/init.h"

namespace lockstep::nn {

Conv2d::Conv2d(const Conv2dOptions& options_in) : options(options_in) {
  const int64_t in = options.in_channels(), out = options.out_channels(), g = options.groups();
  LS_CHECK(in > 0 && out > 0, "Conv2d: in_channels and out_channels must be positive but got ",
           in, " and ", out);
  LS_CHECK(g > 0 && in % g == 0 && out % g == 0, "Conv2d: groups (", g, ") must be positive and "
           "divide in_channels (", in, ") and out_channels (", out, ")");
  for (int64_t k : options.kernel_size()) LS_CHECK(k > 0, "Conv2d: kernel_size must be positive");
  for (int64_t s : options.stride()) LS_CHECK(s > 0, "Conv2d: stride must be positive");
  for (int64_t p : options.padding()) LS_CHECK(p >= 0, "Conv2d: padding must be >= 0");
  for (int64_t d : options.dilation()) LS_CHECK(d > 0, "Conv2d: dilation must be positive");

  const IntList& k = options.kernel_size();
  // See Note [Kaiming init of Linear and Conv].
  weight = register_parameter("weight", empty({out, in / g, k[0], k[1]}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (options.bias()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    bias = register_parameter("bias", empty({out}));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2d::forward(const Tensor& input) {
  LS_CHECK(input.defined() && input.dim() == 4 && input.size(1) == options.in_channels(),
           "Conv2d(", options.in_channels(), ", ", options.out_channels(),
           ").forward: expected input (N, ", options.in_channels(), ", H, W) but got ",
           input.defined() ? input.shape_str() : "an undefined tensor");
  return conv2d(input, weight, bias, options.stride(), options.padding(), options.dilation(),
                options.groups());
}

}  // namespace lockstep::nn
