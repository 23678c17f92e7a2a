// nn/conv_transpose.cpp — ConvTranspose2d's construction (checks, PyTorch init) and forward.
// Read before: nn/conv_transpose.h.
#include "nn/conv_transpose.h"

#include <algorithm>

#include "core/conv_transpose.h"

namespace lockstep::nn {

ConvTranspose2d::ConvTranspose2d(const ConvTranspose2dOptions& options_in) : options(options_in) {
  const IntList& k = options.kernel_size();
  // PyTorch's _ConvNd.reset_parameters: fan_in from dim 1 of the weight, whatever the layout.
  detail::init_conv_parameters(*this, "ConvTranspose2d", options,
                               {options.in_channels(), options.out_channels() / std::max<int64_t>(options.groups(), 1), k[0], k[1]},
                               weight, bias);
}

Tensor ConvTranspose2d::forward(const Tensor& input) {
  run_forward_pre_hooks();  // Note [Forward pre-hooks], nn/module.h
  LS_CHECK(input.defined() && input.dim() == 4 && input.size(1) == options.in_channels(),
           "ConvTranspose2d(", options.in_channels(), ", ", options.out_channels(),
           ").forward: expected input (N, ", options.in_channels(), ", H, W) but got ",
           input.defined() ? input.shape_str() : "an undefined tensor");
  return conv_transpose2d(input, weight, bias, options.stride(), options.padding(), options.output_padding(),
                          options.groups(), options.dilation());
}

}  // namespace lockstep::nn
