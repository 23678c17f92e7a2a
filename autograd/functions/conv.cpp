// autograd/functions/conv.cpp — conv2d, the differentiable op.
//
// Conv2dBackward has three gradient edges, in the order of conv2d's arguments:
// input, weight, bias (an undefined bias has an invalid edge and gets no
// gradient). Its formulas are the GEMMs of Note [Convolution as a matrix
// product] in core/native/conv.cpp, run by native::conv2d_backward; it saves
// the input (for grad_weight) and the weight (for grad_input), like PyTorch's
// ConvolutionBackward, and asks only for the gradients whose edges are valid.
// It supports double backward: recorded_formula below.
//
// Read before: autograd/functions/functions.h, core/native/nn_kernels.h.
// Read next: autograd/functions/pool.cpp.
#include "autograd/functions/autocast_ops.h"
#include "autograd/functions/conv_recorded.h"
#include "autograd/functions/functions.h"
#include "core/conv_transpose.h"
#include "core/native/nn_kernels.h"
#include "core/nn_ops.h"
#include "core/grad_mode.h"
#include "core/profiler.h"

namespace lockstep::autograd {
namespace {

struct Conv2dBackward final : DoubleBackwardNode {
  SavedVariable input, weight;
  // Note [Convolution workspace] (core/native/fast/conv_onednn.h): may be null.
  std::shared_ptr<const native::ConvWorkspace> workspace;
  IntList stride, padding, dilation;
  int64_t groups = 1;
  std::string name() const override { return "Conv2dBackward"; }

  variable_list apply(variable_list&& grads) override {
    if (grad_ops::recording()) return recorded_formula(grads[0]);
    profiler::mark_gemm();  // Note [Profiler bytes]
    auto [grad_input, grad_weight, grad_bias] = native::conv2d_backward_with(
        {Tensor(), workspace}, grads[0], input.unpack(name()), weight.unpack(name()), stride,
        padding, dilation, groups, should_compute_output(0), should_compute_output(1),
        should_compute_output(2));
    return {grad_input, grad_weight, grad_bias};
  }

  // The same gradients as recording ops, for a backward with create_graph (Note
  // [Double backward]), g (N, C_out, H', W'):
  //   dX = conv_transpose2d(g, W), with the output_padding that gives back X's size
  //        (the rows the last window did not reach);
  //   dW = conv2d_weight_grad_recorded (autograd/functions/conv_recorded.h);
  //   db = g summed over (N, H', W').
  variable_list recorded_formula(const Tensor& g) {
    const Tensor x = input.unpack(name()), w = weight.unpack(name());
    Tensor dx, dw, db;
    if (should_compute_output(0)) {
      IntList output_padding(2);
      for (size_t d = 0; d < 2; ++d) {
        const int64_t covered = (g.size(2 + d) - 1) * stride[d] - 2 * padding[d] +
                                dilation[d] * (w.size(2 + d) - 1) + 1;
        output_padding[d] = x.size(2 + d) - covered;  // < stride[d]
      }
      dx = conv_transpose2d(g, w, Tensor(), stride, padding, output_padding, groups, dilation);
    }
    if (should_compute_output(1)) {
      dw = conv2d_weight_grad_recorded(x, g, w.size(2), w.size(3), stride, padding, dilation, groups);
    }
    if (should_compute_output(2)) db = g.sum({0, 2, 3});
    return {dx, dw, db};
  }

  // Note [Convolution gradients summed in place] (core/native/fast/conv_onednn.h).
  bool sums_into_pending(size_t input) const override { return input == 0; }

  variable_list apply_summing(variable_list&& grads, variable_list&& pending) override {
    const Tensor x = input.unpack(name());
    const Tensor& sum = pending[0];
    if (!sum.defined() || !sum.device().is_cpu() || sum.sizes() != x.sizes() ||
        sum.dtype() != x.dtype() || !should_compute_output(0)) {
      return DoubleBackwardNode::apply_summing(std::move(grads), std::move(pending));
    }
    profiler::mark_gemm();
    auto [grad_input, grad_weight, grad_bias] = native::conv2d_backward_with(
        {sum, workspace}, grads[0], x, weight.unpack(name()), stride, padding, dilation, groups,
        /*need_input=*/true, should_compute_output(1), should_compute_output(2));
    return {grad_input, grad_weight, grad_bias};
  }

  void release_variables() override {
    input.reset();
    weight.reset();
    workspace.reset();
  }
};

}  // namespace

Tensor conv2d_weight_grad_recorded(const Tensor& input, const Tensor& grad_out, int64_t kH, int64_t kW,
                                   const IntList& stride, const IntList& padding,
                                   const IntList& dilation, int64_t groups) {
  if (groups > 1) {
    const int64_t in_per = input.size(1) / groups, out_per = grad_out.size(1) / groups;
    std::vector<Tensor> parts;
    for (int64_t j = 0; j < groups; ++j) {
      parts.push_back(conv2d_weight_grad_recorded(input.narrow(1, j * in_per, in_per),
                                                  grad_out.narrow(1, j * out_per, out_per), kH, kW,
                                                  stride, padding, dilation, 1));
    }
    return cat(parts, 0);  // (C_out, C_in / groups, kH, kW)
  }
  Tensor full = conv2d(input.transpose(0, 1), grad_out.transpose(0, 1), Tensor(), dilation, padding,
                       stride).transpose(0, 1);  // (C_out, C_in, >= kH, >= kW)
  return full.narrow(2, 0, kH).narrow(3, 0, kW);
}

}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the op that records this node

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
              const IntList& padding, const IntList& dilation, int64_t groups) {
  if (autocast_applies({&input, &weight, &bias})) {  // Note [Autocast policy]
    return conv2d_autocast(input, weight, bias, stride, padding, dilation, groups);
  }
  profiler::Scope prof("conv2d");
  profiler::mark_gemm();  // Note [Profiler bytes]
  // A weight gradient to come: keep the forward's workspace for it (Note [Convolution workspace]).
  const bool weight_grad = GradMode::is_enabled() && weight.requires_grad();
  auto [out, workspace] =
      weight_grad ? native::conv2d_forward_training(input, weight, bias, stride, padding, dilation,
                                                    groups)
                  : std::tuple<Tensor, std::shared_ptr<const native::ConvWorkspace>>{
                        native::conv2d_forward(input, weight, bias, stride, padding, dilation,
                                               groups),
                        nullptr};
  if (compute_requires_grad({input, weight, bias})) {
    auto node = std::make_shared<Conv2dBackward>();
    node->workspace = std::move(workspace);
    node->input = SavedVariable(input);
    node->weight = SavedVariable(weight);
    node->stride = stride;
    node->padding = padding;
    node->dilation = dilation;
    node->groups = groups;
    record(node, {input, weight, bias}, {out});
  }
  return out;
}

}  // namespace lockstep
