// autograd/functions/batch_norm_relu_pool.cpp — batch_norm_relu_max_pool2d, the
// differentiable op: max_pool2d(relu(batch_norm(input))) as one node.
//
// A ResNet's stem ends in bn1, relu, maxpool; as batch_norm_relu and max_pool2d, the batch
// norm's output and its gradient are each written and read back once (Note [Stem batch
// norm, ReLU and max-pool in one pass] in core/native/fast/batch_norm_relu_pool_bf16_nhwc.cpp
// says what the kernel does instead). Its node, BatchNormReluMaxPool2dBackward, has three
// edges (input, weight, bias) and saves the input, the weight and bias (the ReLU's mask is
// recomputed from them), the statistics and the argmax the forward returned. On a GPU the op
// records the two ops, as before.
//
// Double backward (Note [Double backward by recomputation]): the reference composition,
// batch_norm_relu then max_pool2d, re-run on the saved input, weight and bias with their
// history — in training on the batch's statistics recomputed with history (no running
// statistics passed, so none move), in eval on the saved ones.
//
// Read before: autograd/functions/batch_norm.cpp, core/native/batch_norm_relu_pool.h.
// Read next: models/resnet.cpp (where ResNet's stem calls it).
#include "core/native/batch_norm_relu_pool.h"
#include "autograd/functions/functions.h"
#include "autograd/recompute_backward.h"
#include "core/native/native.h"
#include "core/nn_ops.h"
#include "core/profiler.h"

namespace lockstep::autograd {
namespace {

struct BatchNormReluMaxPool2dBackward final : BackwardNode {
  SavedVariable input, weight, bias, save_mean, save_invstd;
  SavedVariable argmax;  // uint8 window offsets or int64 indices (batch_norm_relu_pool.h)
  IntList kernel_size, stride, padding;
  bool training = true;
  double eps = 1e-5;

  std::string name() const override { return "BatchNormReluMaxPool2dBackward"; }
  bool supports_double_backward() const override { return true; }
  void release_variables() override {
    for (SavedVariable* v : {&input, &weight, &bias, &save_mean, &save_invstd, &argmax}) v->reset();
  }

  variable_list apply(variable_list&& grads) override {
    const Tensor x = input.unpack(name()), w = weight.unpack(name()), b = bias.unpack(name());
    const Tensor mean = save_mean.unpack(name()), invstd = save_invstd.unpack(name());
    if (grad_ops::recording()) return recorded(grads[0], x, w, b, mean, invstd);
    const std::array<bool, 3> need = {should_compute_output(0), should_compute_output(1),
                                      should_compute_output(2)};
    const Tensor g = native::to_dtype(grads[0], x.dtype());  // the output's dtype
    const std::array<Tensor, 3> d =
        native::batch_norm_relu_max_pool2d_backward(g, x, w, b, mean, invstd, argmax.unpack(name()),
                                                    kernel_size, stride, padding, training, need);
    return {d[0], d[1], d[2]};
  }

  variable_list recorded(const Tensor& grad, const Tensor& x, const Tensor& w, const Tensor& b,
                         const Tensor& mean, const Tensor& invstd) {
    // Eval normalises by the running statistics the forward used: as a running variance,
    // 1 / invstd^2 - eps gives back the same invstd.
    using native::BinaryOp;
    const Tensor running_var =
        training ? Tensor()
                 : native::binary_scalar(
                       BinaryOp::Sub,
                       native::scalar_binary(BinaryOp::Div, 1.0,
                                             native::binary(BinaryOp::Mul, invstd, invstd)),
                       eps);
    const Tensor running_mean = training ? Tensor() : mean;
    const auto reference = [&](const std::vector<Tensor>& v) {
      const Tensor y = batch_norm_relu(v[0], v[1], v[2], running_mean, running_var, training,
                                       /*momentum=*/0.0, eps);
      return std::vector<Tensor>{max_pool2d(y, kernel_size, stride, padding)};
    };
    return recorded_gradients(name(), {x, w, b}, reference, {grad});
  }
};

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the op that records this node

Tensor batch_norm_relu_max_pool2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                  const Tensor& running_mean, const Tensor& running_var,
                                  bool training, double momentum, double eps,
                                  const IntList& kernel_size, const IntList& stride,
                                  const IntList& padding) {
  if (input.defined() && input.device().is_cuda()) {  // the two ops' kernels
    return max_pool2d(
        batch_norm_relu(input, weight, bias, running_mean, running_var, training, momentum, eps),
        kernel_size, stride, padding);
  }
  profiler::Scope prof("batch_norm_relu_max_pool2d");
  native::BatchNormReluPoolForward f = native::batch_norm_relu_max_pool2d_forward(
      input, {weight, bias, running_mean, running_var}, training, momentum, eps, kernel_size,
      stride, padding);
  if (compute_requires_grad({input, weight, bias})) {
    auto node = std::make_shared<BatchNormReluMaxPool2dBackward>();
    node->input = SavedVariable(input);
    node->weight = SavedVariable(weight);
    node->bias = SavedVariable(bias);
    node->save_mean = SavedVariable(f.save_mean);
    node->save_invstd = SavedVariable(f.save_invstd);
    node->argmax = SavedVariable(f.argmax);
    profiler::add_bytes(static_cast<int64_t>(f.argmax.nbytes()));  // written beside the output
    node->kernel_size = kernel_size;
    node->stride = stride;
    node->padding = padding;
    node->training = training;
    node->eps = eps;
    record(node, {input, weight, bias}, {f.output});
  }
  return f.output;
}

}  // namespace lockstep
