// nn/conv.cpp — Conv2d's construction (checks, PyTorch init) and forward.
// Read before: nn/conv.h.
#include "nn/conv.h"

#include <algorithm>
#include <cmath>

#include "core/factory.h"
#include "core/nn_ops.h"
#include "nn/init.h"

namespace lockstep::nn {

void detail::init_conv_parameters(Module& m, const char* name, const ConvOptionsValues& options,
                                  const IntList& weight_shape, Tensor& weight, Tensor& bias) {
  const int64_t in = options.in_channels(), out = options.out_channels(), g = options.groups();
  LS_CHECK(in > 0 && out > 0, name, ": in_channels and out_channels must be positive but got ",
           in, " and ", out);
  LS_CHECK(g > 0 && in % g == 0 && out % g == 0, name, ": groups (", g, ") must be positive and "
           "divide in_channels (", in, ") and out_channels (", out, ")");
  for (int64_t k : options.kernel_size()) LS_CHECK(k > 0, name, ": kernel_size must be positive");
  for (int64_t s : options.stride()) LS_CHECK(s > 0, name, ": stride must be positive");
  for (int64_t p : options.padding()) LS_CHECK(p >= 0, name, ": padding must be >= 0");
  for (int64_t d : options.dilation()) LS_CHECK(d > 0, name, ": dilation must be positive");

  // See Note [Kaiming init of Linear and Conv].
  weight = m.register_parameter("weight", empty(weight_shape));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (options.bias()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    bias = m.register_parameter("bias", empty({out}));
    init::uniform_(bias, -bound, bound);
  }
}

Conv2d::Conv2d(const Conv2dOptions& options_in) : options(options_in) {
  const IntList& k = options.kernel_size();
  detail::init_conv_parameters(*this, "Conv2d", options,
                               {options.out_channels(), options.in_channels() / std::max<int64_t>(options.groups(), 1), k[0], k[1]},
                               weight, bias);
}

Tensor Conv2d::forward(const Tensor& input) {
  run_forward_pre_hooks();  // Note [Forward pre-hooks], nn/module.h
  LS_CHECK(input.defined() && input.dim() == 4 && input.size(1) == options.in_channels(),
           "Conv2d(", options.in_channels(), ", ", options.out_channels(),
           ").forward: expected input (N, ", options.in_channels(), ", H, W) but got ",
           input.defined() ? input.shape_str() : "an undefined tensor");
  return conv2d(input, weight, bias, options.stride(), options.padding(), options.dilation(),
                options.groups());
}

}  // namespace lockstep::nn
