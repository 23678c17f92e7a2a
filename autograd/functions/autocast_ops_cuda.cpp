// autograd/functions/autocast_ops_cuda.cpp — the autocast nodes of linear and
// conv2d for CUDA tensors, part of lockstep's CUDA library (Note [CUDA build]).
//
// linear_autocast and conv2d_autocast (autocast_ops.cpp) hand a CUDA input over
// to the functions below, through AutocastCudaHooks, which this file registers. Each records ONE node whose inputs are the original
// tensors, exactly as the CPU's (Note [Autocast casts inside the op]): forward
// converts x per call and W once per guard (autocast::cached_cast, which works on
// any device) and runs the bf16 kernel; backward returns dX in x's dtype and dW,
// db in float32. The kernels are core/cuda/autocast_kernels.cu (Note [Autocast on
// CUDA] there: what each pass computes, and where it differs from the CPU —
// conv2d's weight gradient is rounded to bf16 before it is widened).
// cuBLAS reads a transposed operand at full speed, so linear reads W as it is:
// no cached_cast_transposed copy on a GPU.
//
//   linear   y (*, out) bf16 = x (*, in) W^T + b      saves x16 (*, in), W16 (out, in)
//   conv2d   y (N, C_out, oH, oW) bf16                 saves x16 (N, C_in, H, W), W16
// conv2d's node keeps both bf16 copies whenever it is recorded: cuDNN's backward
// reads the geometry from both (the CPU node keeps x only for dW).
//
// Read before: autograd/functions/autocast_ops.cpp, core/cuda/autocast_kernels.cu.
// Read next: autograd/functions/linear.cpp.
#include "autograd/functions/autocast_ops.h"

#include "autograd/functions/functions.h"
#include "autograd/functions/linear_autocast_saved.h"
#include "core/cuda/cuda_native_nn.h"
#include "core/cuda_hooks.h"
#include "core/native/native.h"
#include "core/profiler.h"

namespace lockstep::autograd {

namespace {

// A float32 gradient for an input of `dtype` (parameters are float32: a no-op then).
Tensor in_dtype(const Tensor& g, ScalarType dtype) {
  return g.defined() && g.dtype() != dtype ? native::to_dtype(g, dtype) : g;
}

struct LinearAutocastCudaBackward final : BackwardNode, LinearAutocastSaved {
  std::string name() const override { return "LinearAutocastBackward"; }

  variable_list apply(variable_list&& grads) override {
    const bool need_x = should_compute_output(0), need_w = should_compute_output(1);
    auto [dx, dw, db] = cuda_native::linear_autocast_backward(
        grads[0], need_w ? input16.unpack(name()) : Tensor(),
        need_x ? weight16.unpack(name()) : Tensor(), input_dtype, need_x, need_w,
        should_compute_output(2));
    return {dx, in_dtype(dw, weight_dtype), in_dtype(db, bias_dtype)};
  }
  void release_variables() override { reset_saved(); }
};

struct Conv2dAutocastCudaBackward final : BackwardNode {
  SavedVariable input16, weight16;  // bf16 (N, C_in, H, W) and (C_out, C_in / groups, kH, kW)
  IntList stride, padding, dilation;
  int64_t groups = 1;
  ScalarType input_dtype = kFloat32, weight_dtype = kFloat32, bias_dtype = kFloat32;
  std::string name() const override { return "Conv2dAutocastBackward"; }

  variable_list apply(variable_list&& grads) override {
    auto [dx, dw, db] = cuda_native::conv2d_autocast_backward(
        grads[0], input16.unpack(name()), weight16.unpack(name()), stride, padding, dilation,
        groups, input_dtype, should_compute_output(0), should_compute_output(1),
        should_compute_output(2));
    return {dx, in_dtype(dw, weight_dtype), in_dtype(db, bias_dtype)};
  }
  void release_variables() override {
    input16.reset();
    weight16.reset();
  }
};

Tensor linear_autocast_cuda(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  profiler::Scope prof("linear_bf16");
  LS_CHECK(weight.defined(), "linear: input and weight must be defined tensors");
  const Tensor x16 = native::contiguous(autocast::cached_cast(input, kBFloat16));   // (*, in)
  const Tensor w16 = native::contiguous(autocast::cached_cast(weight, kBFloat16));  // (out, in)
  const Tensor b16 = autocast::cached_cast(bias, kBFloat16);                          // (out)
  Tensor y = cuda_native::linear_autocast_forward(x16, w16, b16);                     // (*, out)
  if (compute_requires_grad({input, weight, bias})) {
    auto node = std::make_shared<LinearAutocastCudaBackward>();
    node->save(input, weight, bias, x16, w16);
    record(node, {input, weight, bias}, {y});
  }
  return y;
}

Tensor conv2d_autocast_cuda(const Tensor& input, const Tensor& weight, const Tensor& bias,
                            const IntList& stride, const IntList& padding,
                            const IntList& dilation, int64_t groups) {
  profiler::Scope prof("conv2d_bf16");
  LS_CHECK(weight.defined(), "conv2d: input and weight must be defined tensors");
  const Tensor x16 = native::contiguous(autocast::cached_cast(input, kBFloat16));  // (N, C_in, H, W)
  const Tensor w16 = native::contiguous(autocast::cached_cast(weight, kBFloat16));
  const Tensor b32 = bias.defined() ? native::to_dtype(bias, kFloat32) : bias;  // (C_out)
  Tensor y = cuda_native::conv2d_autocast_forward(x16, w16, b32, stride, padding, dilation,
                                                  groups);  // (N, C_out, oH, oW) bf16
  if (compute_requires_grad({input, weight, bias})) {
    auto node = std::make_shared<Conv2dAutocastCudaBackward>();
    node->stride = stride;
    node->padding = padding;
    node->dilation = dilation;
    node->groups = groups;
    node->input_dtype = input.dtype();
    node->weight_dtype = weight.dtype();
    node->bias_dtype = bias.defined() ? bias.dtype() : kFloat32;
    node->input16 = SavedVariable(x16);
    node->weight16 = SavedVariable(w16);
    record(node, {input, weight, bias}, {y});
  }
  return y;
}

// The static registrar (Note [CUDA hooks]).
const AutocastCudaHooks autocast_hooks{&linear_autocast_cuda, &conv2d_autocast_cuda};
const bool autocast_hooks_registered = lockstep::detail::register_cuda_hooks(autocast_hooks);

}  // namespace
}  // namespace lockstep::autograd
