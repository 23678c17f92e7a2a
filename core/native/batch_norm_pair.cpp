// core/native/batch_norm_pair.cpp — relu(batch_norm(x) + batch_norm(r)): which kernel
// runs it, and the reference, the two ops in turn.
//
// Channels-last bfloat16 CPU operands go to fast/batch_norm_bf16_nhwc_pair.cpp (Note
// [Downsample batch norm folded] there) after the same checks batch norm's own bf16
// kernels make, each error naming the pair. Everything else, and every input when
// LOCKSTEP_BF16_BN_PAIR=0, runs the reference: batch_norm_forward on the residual, then
// batch_norm_add_relu_forward with its output as the residual; backward,
// batch_norm_add_relu's backward (whose residual gradient is gm), then batch norm's
// backward of gm. The reference's checks and errors are those two ops'. Its bytes
// (Note [Profiler bytes]) count the tensors it writes and reads back between the two,
// which the node's own count (its operands and results) cannot see: with
// LOCKSTEP_BF16_BN_PAIR=0 the profiler's column shows what the two ops moved.
//
// Read before: core/native/batch_norm_pair.h, core/native/fused_relu.h.
// Read next: core/native/fast/batch_norm_bf16_nhwc_pair.cpp.
#include "core/native/batch_norm_pair.h"

#include "core/env_flag.h"
#include "core/native/batch_norm_bf16.h"
#include "core/native/fused_relu.h"
#include "core/native/memory_format.h"
#include "core/native/nn_kernels.h"
#include "core/profiler.h"

namespace lockstep::native {

namespace {

using batch_norm_detail::Mask;

constexpr const char* kOp = "batch_norm_add_batch_norm_relu";

// Whether the fast kernel takes these operands (checked there, with messages).
bool fast_pair(const Tensor& input, const Tensor& residual) {
  static const bool on = env_flag("LOCKSTEP_BF16_BN_PAIR", true);
  return on && input.defined() && residual.defined() && !input.device().is_cuda() &&
         !residual.device().is_cuda() && input.dtype() == kBFloat16 &&
         residual.dtype() == kBFloat16 && residual.sizes() == input.sizes() &&
         choose_batch_norm(input, kOp) == BatchNormImpl::Bf16ChannelsLast &&
         stored_channels_last(residual);
}

}  // namespace

BatchNormPairForward batch_norm_pair_forward(const Tensor& input, const BatchNormTensors& bn,
                                             const Tensor& residual,
                                             const BatchNormTensors& residual_bn, bool training,
                                             double momentum, double eps, Tensor* relu_bits) {
  if (relu_bits != nullptr) *relu_bits = Tensor();
  lockstep::detail::check_defined(input, kOp);
  lockstep::detail::check_defined(residual, kOp);
  LS_CHECK(residual.sizes() == input.sizes() && residual.dtype() == input.dtype() &&
               residual.device() == input.device(),
           kOp, ": the residual must have the input's shape, dtype and device, but the input is ",
           input.dtype(), " ", input.shape_str(), " on ", input.device().str(),
           " and the residual ", residual.dtype(), " ", residual.shape_str(), " on ",
           residual.device().str(),
           "; a residual of another shape needs its own batch_norm and then batch_norm_add_relu");
  if (fast_pair(input, residual)) {
    check_batch_norm_bf16_forward(input, residual, bn.weight, bn.bias, bn.running_mean,
                                  bn.running_var, training, kOp);
    check_batch_norm_bf16_forward(residual, Tensor(), residual_bn.weight, residual_bn.bias,
                                  residual_bn.running_mean, residual_bn.running_var, training, kOp);
    return batch_norm_bf16_nhwc_pair_forward(input, bn, residual, residual_bn, training, momentum,
                                             eps, relu_bits, kOp);
  }
  BatchNormPairForward f;
  Tensor r;  // (N, C, *): bn_r(residual)
  std::tie(r, f.residual_save_mean, f.residual_save_invstd) =
      batch_norm_forward(residual, residual_bn.weight, residual_bn.bias, residual_bn.running_mean,
                         residual_bn.running_var, training, momentum, eps);
  std::tie(f.output, f.save_mean, f.save_invstd) =
      batch_norm_add_relu_forward(input, r, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                                  training, momentum, eps, relu_bits);
  // r written, and read back by the add (Note [Profiler bytes]).
  profiler::add_bytes(static_cast<int64_t>(2 * r.nbytes()));
  return f;
}

BatchNormPairGrads batch_norm_pair_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& save_mean,
    const Tensor& save_invstd, const Tensor& residual, const Tensor& residual_weight,
    const Tensor& residual_save_mean, const Tensor& residual_save_invstd, const Tensor& mask_source,
    bool mask_in_bits, bool training, const std::array<bool, 6>& need) {
  if (fast_pair(input, residual)) {
    check_batch_norm_bf16_backward(grad_output, input, weight, save_mean, save_invstd, kOp);
    check_batch_norm_bf16_backward(grad_output, residual, residual_weight, residual_save_mean,
                                   residual_save_invstd, kOp);
    return batch_norm_bf16_nhwc_pair_backward(
        grad_output, input, weight, save_mean, save_invstd, residual, residual_weight,
        residual_save_mean, residual_save_invstd, mask_source,
        mask_in_bits ? Mask::Bits : Mask::Output, training, need, kOp);
  }
  BatchNormPairGrads d;
  Tensor gm;  // (N, C, *): grad_output * (output > 0), the residual batch norm's output's gradient
  std::tie(d.grad_input, d.grad_weight, d.grad_bias, gm) =
      mask_in_bits
          ? batch_norm_add_relu_backward_bits(grad_output, input, weight, save_mean, save_invstd,
                                              mask_source, training, need[0], need[1], need[2])
          : batch_norm_add_relu_backward(grad_output, input, weight, save_mean, save_invstd,
                                         mask_source, training, need[0], need[1], need[2]);
  const bool residual_grads = need[3] || need[4] || need[5];
  if (residual_grads) {
    std::tie(d.grad_residual, d.grad_residual_weight, d.grad_residual_bias) =
        batch_norm_backward(gm, residual, residual_weight, residual_save_mean, residual_save_invstd,
                            training, need[3], need[4], need[5]);
  }
  // gm written, and read back by the second backward (Note [Profiler bytes]).
  profiler::add_bytes(static_cast<int64_t>((residual_grads ? 2 : 1) * gm.nbytes()));
  return d;
}

}  // namespace lockstep::native
