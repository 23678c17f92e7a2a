// autograd/functions/pool.cpp — max_pool2d and adaptive_avg_pool2d, the differentiable ops.
//
//   MaxPool2dBackward         saves the int64 indices of the maxima (not the
//                             input): the gradient goes to those positions only.
//   AdaptiveAvgPool2dBackward saves nothing but the input's shape: each output's
//                             gradient is spread evenly over its window.
// The kernels are in core/native/pool.cpp. Both formulas are linear in the
// gradient with constants from the forward, so a backward with create_graph
// runs them as linear maps (Note [Linear backward formulas]): max-pool's adjoint
// gathers at the saved indices, adaptive average pooling's is the forward pool.
//
// Read before: autograd/functions/conv.cpp. Read next: autograd/functions/batch_norm.cpp.
#include "autograd/functions/functions.h"
#include "autograd/functions/linear_map.h"
#include "core/native/gather.h"
#include "core/native/nn_kernels.h"
#include "core/nn_ops.h"
#include "core/profiler.h"

namespace lockstep::autograd {
namespace {

struct MaxPool2dBackward final : DoubleBackwardNode {
  SavedVariable indices;  // (N, C, oH, oW) int64, flat positions in each (H, W) plane
  IntList input_sizes;
  IntList tile;  // {kH, kW} when the windows tile the input, else empty
  std::string name() const override { return "MaxPool2dBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor idx = indices.unpack(name());
    if (!grad_ops::recording()) return {native::max_pool2d_backward(grads[0], idx, input_sizes, tile)};
    return {apply_linear_map(grads[0], make_linear_map(
        name(),
        [idx, sizes = input_sizes, tile = tile](const Tensor& g) {  // -> (N, C, H, W)
          return native::max_pool2d_backward(native::contiguous(g), idx, sizes, tile);
        },
        [idx, sizes = input_sizes](const Tensor& x) {  // (N, C, H, W) -> idx's shape
          const IntList planes{sizes[0], sizes[1], -1};
          Tensor picked = native::gather(native::reshape(x, planes), 2, native::reshape(idx, planes));
          return native::reshape(picked, idx.sizes());
        }))};
  }
  void release_variables() override { indices.reset(); }
};

struct AdaptiveAvgPool2dBackward final : DoubleBackwardNode {
  IntList input_sizes;
  std::string name() const override { return "AdaptiveAvgPool2dBackward"; }
  variable_list apply(variable_list&& grads) override {
    if (!grad_ops::recording()) return {native::adaptive_avg_pool2d_backward(grads[0], input_sizes)};
    return {apply_linear_map(grads[0], make_linear_map(
        name(),
        [sizes = input_sizes](const Tensor& g) {
          return native::adaptive_avg_pool2d_backward(native::contiguous(g), sizes);
        },
        [out_hw = IntList{grads[0].size(2), grads[0].size(3)}](const Tensor& x) {
          return native::adaptive_avg_pool2d_forward(native::contiguous(x), out_hw);
        }))};
  }
};

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the ops that record these nodes

Tensor max_pool2d(const Tensor& input, const IntList& kernel_size, const IntList& stride,
                  const IntList& padding) {
  profiler::Scope prof("max_pool2d");
  auto [out, indices] = native::max_pool2d_forward(input, kernel_size, stride, padding);
  if (compute_requires_grad({input})) {
    auto node = std::make_shared<MaxPool2dBackward>();
    node->indices = SavedVariable(indices);
    node->input_sizes = input.sizes();
    node->tile = native::max_pool2d_tile(kernel_size, stride, padding);
    record(node, {input}, {out});
  }
  return out;
}

Tensor adaptive_avg_pool2d(const Tensor& input, const IntList& output_size) {
  profiler::Scope prof("adaptive_avg_pool2d");
  Tensor out = native::adaptive_avg_pool2d_forward(input, output_size);
  if (compute_requires_grad({input})) {
    auto node = std::make_shared<AdaptiveAvgPool2dBackward>();
    node->input_sizes = input.sizes();
    record(node, {input}, {out});
  }
  return out;
}

}  // namespace lockstep
