// core/native/batch_norm_relu_pool.cpp — max_pool2d(relu(batch_norm(x))): which kernel runs
// it, and the reference, the two ops in turn.
//
// Channels-last bfloat16 CPU inputs go to fast/batch_norm_relu_pool_bf16_nhwc.cpp (Note
// [Stem batch norm, ReLU and max-pool in one pass] there) after the checks batch norm's own
// bf16 kernels and max_pool2d make, each error naming the op. Everything else, and every
// input when LOCKSTEP_BF16_BN_POOL=0, runs the reference: batch_norm_relu_forward, then
// max_pool2d_forward on its output; backward, max_pool2d_backward, then batch norm's backward
// with the ReLU's mask recomputed from the input (batch_norm_relu_backward_from_input), so
// the reference keeps what the fused op keeps plus max_pool2d's indices. Its bytes (Note
// [Profiler bytes]) count the tensors it writes and reads back between the two ops, which
// the node's own count cannot see: with LOCKSTEP_BF16_BN_POOL=0 the profiler's column shows
// what the two ops moved. CPU only: on a GPU the op records the two ops themselves
// (autograd/functions/batch_norm_relu_pool.cpp).
//
// Read before: core/native/batch_norm_relu_pool.h, core/native/fused_relu.h.
// Read next: core/native/fast/batch_norm_relu_pool_bf16_nhwc.cpp.
#include "core/native/batch_norm_relu_pool.h"

#include "core/env_flag.h"
#include "core/native/batch_norm_bf16.h"
#include "core/native/fused_relu.h"
#include "core/native/memory_format.h"
#include "core/profiler.h"

namespace lockstep::native {

namespace {

constexpr const char* kOp = "batch_norm_relu_max_pool2d";

// Windows of at most this many elements keep their argmax in one byte.
constexpr int64_t kMaxWindow = 255;

// Whether the fast kernel takes this input (its remaining checks come after, with messages).
bool fast_kernel(const Tensor& input, const rules::PoolWindow& p) {
  static const bool on = env_flag("LOCKSTEP_BF16_BN_POOL", true);
  return on && input.dtype() == kBFloat16 && p.kh * p.kw <= kMaxWindow &&
         choose_batch_norm(input, kOp) == BatchNormImpl::Bf16ChannelsLast;
}

rules::PoolWindow window_of(const Tensor& input, const IntList& kernel_size, const IntList& stride,
                            const IntList& padding) {
  rules::check_image(
      input, kOp,
      [&] {
        LS_CHECK(!input.device().is_cuda(), kOp,
                 ": the fused kernel runs on the CPU, but the input "
                 "is on ",
                 input.device().str(),
                 "; call batch_norm_relu_max_pool2d (the op), which "
                 "records batch_norm_relu and max_pool2d there");
      },
      /*bfloat16_ok=*/true);
  return rules::max_pool2d_window(input, kernel_size, stride, padding, kOp);
}

}  // namespace

BatchNormReluPoolForward batch_norm_relu_max_pool2d_forward(
    const Tensor& input, const BatchNormTensors& bn, bool training, double momentum, double eps,
    const IntList& kernel_size, const IntList& stride, const IntList& padding) {
  const rules::PoolWindow p = window_of(input, kernel_size, stride, padding);
  if (fast_kernel(input, p)) {
    check_batch_norm_bf16_forward(input, Tensor(), bn.weight, bn.bias, bn.running_mean,
                                  bn.running_var, training, kOp);
    return detail::batch_norm_relu_pool_bf16_nhwc_forward(input, bn, training, momentum, eps, p);
  }
  BatchNormReluPoolForward f;
  Tensor y;  // (N, C, H, W): relu(batch_norm(input))
  std::tie(y, f.save_mean, f.save_invstd) = batch_norm_relu_forward(
      input, bn.weight, bn.bias, bn.running_mean, bn.running_var, training, momentum, eps);
  std::tie(f.output, f.argmax) = max_pool2d_forward(y, kernel_size, stride, padding);
  // y written, and read back by the pool (Note [Profiler bytes]).
  profiler::add_bytes(static_cast<int64_t>(2 * y.nbytes()));
  return f;
}

std::array<Tensor, 3> batch_norm_relu_max_pool2d_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& bias,
    const Tensor& save_mean, const Tensor& save_invstd, const Tensor& argmax,
    const IntList& kernel_size, const IntList& stride, const IntList& padding, bool training,
    const std::array<bool, 3>& need) {
  const rules::PoolWindow p = window_of(input, kernel_size, stride, padding);
  lockstep::detail::check_defined(argmax, kOp);
  lockstep::detail::check_defined(grad_output, kOp);
  LS_CHECK(grad_output.dim() == 4 && grad_output.size(0) == input.size(0) &&
               grad_output.size(1) == input.size(1) && grad_output.size(2) == p.oh &&
               grad_output.size(3) == p.ow,
           kOp, ": grad_output must have the output's shape (", input.size(0), ", ", input.size(1),
           ", ", p.oh, ", ", p.ow, ") but got ", grad_output.shape_str());
  if (argmax.dtype() == kUInt8) {  // the fast kernel's window offsets
    LS_CHECK(input.dtype() == kBFloat16 && stored_channels_last(input), kOp,
             ": window offsets (uint8) come from the channels-last bfloat16 kernel, but the input "
             "is ",
             input.dtype(), stored_channels_last(input) ? " channels-last" : " not channels-last",
             "; pass the argmax the forward returned for this very input");
    LS_CHECK(grad_output.dtype() == kBFloat16, kOp,
             ": grad_output must be bfloat16 like the "
             "input, but is ",
             grad_output.dtype());
    // The parameters' and statistics' checks; grad_output has the pool's shape (checked
    // above), so the input stands in for it, and the bias feeds the ReLU's mask.
    check_batch_norm_bf16_backward(input, input, weight, save_mean, save_invstd, kOp);
    check_batch_norm_bf16_forward(input, Tensor(), weight, bias, Tensor(), Tensor(), true, kOp);
    return detail::batch_norm_relu_pool_bf16_nhwc_backward(
        grad_output, input, weight, bias, save_mean, save_invstd, argmax, p, training, need);
  }
  LS_CHECK(argmax.dtype() == kInt64, kOp,
           ": argmax must be the forward's uint8 window offsets "
           "or int64 indices, but is ",
           argmax.dtype());
  // (N, C, H, W): the batch norm's output's gradient, scattered from grad_output
  const Tensor g = max_pool2d_backward(grad_output, argmax, input.sizes(),
                                       max_pool2d_tile(kernel_size, stride, padding));
  auto [gx, gw, gb] = batch_norm_relu_backward_from_input(
      g, input, weight, bias, save_mean, save_invstd, training, need[0], need[1], need[2]);
  // g written, and read back by the batch norm's backward (Note [Profiler bytes]).
  profiler::add_bytes(static_cast<int64_t>(2 * g.nbytes()));
  return {gx, gw, gb};
}

}  // namespace lockstep::native
