// nn/pooling.h — MaxPool2d and AdaptiveAvgPool2d.
//
// MaxPool2d(kernel) strides by the kernel size (PyTorch's stride=None);
// MaxPool2d(kernel, stride, padding) sets them (padding counts as -inf).
// AdaptiveAvgPool2d(out_hw) averages over windows chosen so the output is
// (N, C, out_h, out_w) whatever H and W are; ResNet ends with AdaptiveAvgPool2d(1).
// Read before: nn/expanding_array.h, nn/conv.h. Read next: nn/flatten.h.
#pragma once

#include "core/nn_ops.h"
#include "nn/expanding_array.h"
#include "nn/unary_module.h"

namespace lockstep::nn {

struct MaxPool2d : UnaryModule {
  explicit MaxPool2d(ExpandingArray<2> kernel_size) : MaxPool2d(kernel_size, kernel_size, 0) {}
  MaxPool2d(ExpandingArray<2> kernel_size, ExpandingArray<2> stride, ExpandingArray<2> padding = 0)
      : kernel_size(kernel_size), stride(stride), padding(padding) {
    for (size_t i = 0; i < 2; ++i) {
      LS_CHECK(kernel_size[i] > 0 && stride[i] > 0 && padding[i] >= 0, "MaxPool2d: kernel_size "
               "and stride must be positive and padding >= 0");
      LS_CHECK(2 * padding[i] <= kernel_size[i], "MaxPool2d: padding (", padding[i],
               ") should be at most half of kernel_size (", kernel_size[i], ")");
    }
  }

  std::string type_name() const override { return "MaxPool2d"; }
  // (N, C, H, W) -> (N, C, (H + 2p - k) / s + 1, ...)
  Tensor forward(const Tensor& input) override {
    return max_pool2d(input, kernel_size, stride, padding);
  }

  ExpandingArray<2> kernel_size, stride, padding;
};

struct AdaptiveAvgPool2d : UnaryModule {
  explicit AdaptiveAvgPool2d(ExpandingArray<2> output_size) : output_size(output_size) {
    LS_CHECK(output_size[0] > 0 && output_size[1] > 0,
             "AdaptiveAvgPool2d: output_size must be positive");
  }

  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  // (N, C, H, W) -> (N, C, out_h, out_w)
  Tensor forward(const Tensor& input) override { return adaptive_avg_pool2d(input, output_size); }

  ExpandingArray<2> output_size;
};

}  // namespace lockstep::nn
