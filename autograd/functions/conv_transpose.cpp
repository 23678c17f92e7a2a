// autograd/functions/conv_transpose.cpp — conv_transpose2d (core/conv_transpose.h)
// and ConvTranspose2dBackward, both written with conv2d's kernels. In a backward
// with create_graph its formula records instead (Note [Double backward]):
//   dx = conv2d(g, W) with the same geometry, dW = conv2d_weight_grad_recorded(g, x)
//   (autograd/functions/conv_recorded.h: the roles of input and gradient swap),
//   db = g summed over (N, H', W').
// Read before: core/conv_transpose.h, autograd/functions/conv.cpp.
// Read next: nn/conv_transpose.h.
#include "core/conv_transpose.h"

#include "autograd/functions/conv_recorded.h"
#include "autograd/functions/functions.h"
#include "core/nn_ops.h"
#include "core/native/nn_kernels.h"
#include "core/profiler.h"

namespace lockstep::autograd {
namespace {

struct Geometry {
  IntList stride, padding, dilation;
  int64_t groups = 1;
};

// conv2d's input gradient: a (N, C_out, H', W') tensor from x (N, C_in, H, W).
Tensor transposed(const Tensor& x, const Tensor& weight, const IntList& out_sizes, const Geometry& g) {
  const Tensor shape_only = native::zeros(out_sizes, x.dtype(), x.device());  // conv2d's "input"
  return std::get<0>(native::conv2d_backward(x, shape_only, weight, g.stride, g.padding, g.dilation,
                                             g.groups, /*need_input=*/true, false, false));
}

struct ConvTranspose2dBackward final : DoubleBackwardNode {
  SavedVariable input, weight;
  Geometry geometry;
  bool has_bias = false;
  std::string name() const override { return "ConvTranspose2dBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];  // (N, C_out, H', W')
    const Tensor x = input.unpack(name()), w = weight.unpack(name());
    const Geometry& k = geometry;
    if (grad_ops::recording()) return recorded_formula(g, x, w);
    Tensor dx, dw, db;
    if (should_compute_output(0)) {
      dx = native::conv2d_forward(g, w, Tensor(), k.stride, k.padding, k.dilation, k.groups);
    }
    if (should_compute_output(1)) {
      dw = std::get<1>(native::conv2d_backward(x, g, w, k.stride, k.padding, k.dilation, k.groups,
                                               false, /*need_weight=*/true, false));
    }
    if (has_bias && should_compute_output(2)) db = native::sum(g, {0, 2, 3}, false);
    return {dx, dw, db};
  }
  variable_list recorded_formula(const Tensor& g, const Tensor& x, const Tensor& w) {
    const Geometry& k = geometry;
    Tensor dx, dw, db;
    if (should_compute_output(0)) dx = conv2d(g, w, Tensor(), k.stride, k.padding, k.dilation, k.groups);
    if (should_compute_output(1)) {
      dw = conv2d_weight_grad_recorded(g, x, w.size(2), w.size(3), k.stride, k.padding, k.dilation,
                                       k.groups);
    }
    if (has_bias && should_compute_output(2)) db = g.sum({0, 2, 3});
    return {dx, dw, db};
  }
  void release_variables() override {
    input.reset();
    weight.reset();
  }
};

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the op that records this node

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
                        const IntList& padding, const IntList& output_padding, int64_t groups,
                        const IntList& dilation) {
  profiler::Scope prof("conv_transpose2d");
  const char* op = "conv_transpose2d";
  LS_CHECK(input.defined() && weight.defined() && input.dim() == 4 && weight.dim() == 4, op,
           ": expected input (N, C_in, H, W) and weight (C_in, C_out / groups, kH, kW) but got ",
           input.defined() ? input.shape_str() : "undefined", " and ",
           weight.defined() ? weight.shape_str() : "undefined");
  LS_CHECK(stride.size() == 2 && padding.size() == 2 && output_padding.size() == 2 && dilation.size() == 2,
           op, ": stride, padding, output_padding and dilation need 2 values each");
  LS_CHECK(groups > 0 && input.size(1) == weight.size(0) && weight.size(0) % groups == 0, op, ": input has ",
           input.size(1), " channels but weight ", weight.shape_str(), " expects ", weight.size(0),
           " (divisible by groups = ", groups, ")");
  IntList out{input.size(0), weight.size(1) * groups, 0, 0};
  for (int d = 0; d < 2; ++d) {
    LS_CHECK(stride[d] > 0 && dilation[d] > 0 && padding[d] >= 0, op, ": stride and dilation must be "
             "positive and padding >= 0");
    LS_CHECK(output_padding[d] >= 0 && (output_padding[d] < stride[d] || output_padding[d] < dilation[d]), op,
             ": output_padding (", output_padding[d], ") must be smaller than stride or dilation");
    out[2 + d] = (input.size(2 + d) - 1) * stride[d] - 2 * padding[d] +
                 dilation[d] * (weight.size(2 + d) - 1) + output_padding[d] + 1;
    LS_CHECK(out[2 + d] > 0, op, ": the output would be empty (", out[2 + d], ") for input ",
             input.shape_str());
  }
  if (bias.defined()) {
    LS_CHECK(bias.dim() == 1 && bias.size(0) == out[1], op, ": bias must be (", out[1], ") but got ",
             bias.shape_str());
  }
  const Geometry geometry{stride, padding, dilation, groups};
  Tensor y;
  {
    NoGradGuard no_grad;
    y = transposed(input, weight, out, geometry);  // (N, C_out, H', W')
    if (bias.defined()) y = native::binary(native::BinaryOp::Add, y, native::view(bias, {1, out[1], 1, 1}));
  }
  if (compute_requires_grad({input, weight, bias})) {
    auto node = std::make_shared<ConvTranspose2dBackward>();
    node->input = SavedVariable(input);
    node->weight = SavedVariable(weight);
    node->geometry = geometry;
    node->has_bias = bias.defined();
    record(node, {input, weight, bias}, {y});
  }
  return y;
}

}  // namespace lockstep
