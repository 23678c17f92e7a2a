// core/native/batch_norm_bf16.h — batch norm on bfloat16 activations, float32 statistics.
//
// The kernels batch_norm_forward / batch_norm_relu_forward / batch_norm_add_relu_forward
// and their backwards (core/native/nn_kernels.h, fused_relu.h) hand a bfloat16 input
// to (Note [bfloat16 batch norm] in batch_norm_bf16.cpp). Operands:
//   forward    input, residual (N, C, *) bf16; weight, bias, running_mean, running_var (C)
//              float32 or undefined  ->  (output (N, C, *) bf16, save_mean, save_invstd (C) f32)
//   backward   grad_output, input, output (N, C, *) bf16; weight, bias, save_mean,
//              save_invstd (C) f32  ->  (grad_input bf16, grad_weight f32, grad_bias f32),
//              and the residual's gradient (bf16) when asked for.
// A channels-last input (Note [Channels-last activations] in memory_format.h) keeps
// its order: the activation-shaped results are then channels-last too (Note
// [bfloat16 batch norm on channels-last activations] in fast/batch_norm_bf16_nhwc.cpp).
//
// Read before: core/native/batch_norm.cpp, core/native/batch_norm_sums.h.
// Read next: core/native/fast/batch_norm_bf16_nhwc.cpp, autograd/functions/batch_norm.cpp.
#pragma once

#include <tuple>

#include "core/native/batch_norm_pair.h"
#include "core/native/batch_norm_sums.h"
#include "core/tensor.h"

namespace lockstep::native {

// Which implementation runs a CPU batch norm, forward or backward, every fused
// variant (Note [Kernel dispatch] in dispatch_verbose.h), by the input alone:
//   Planes            batch_norm.cpp: float32 / float64, channel by channel over its planes
//   Bf16Planes        batch_norm_bf16.cpp: bfloat16 NCHW, float32 statistics
//   Bf16ChannelsLast  fast/batch_norm_bf16_nhwc.cpp: bfloat16 stored channels-last
// batch_norm.cpp's entry points call choose_batch_norm once (undefined input:
// Planes, whose checks then name it) and hand the bf16 choices to the kernels below.
enum class BatchNormImpl { Planes, Bf16Planes, Bf16ChannelsLast };
const char* batch_norm_impl_name(BatchNormImpl impl);  // "planes", "bf16_planes", ...
BatchNormImpl choose_batch_norm(const Tensor& input, const char* op);

// The checks of the two below, each naming op: the input (N, C, *) bf16 on the CPU,
// the (C) float32 parameters and statistics, a residual or grad_output like the
// input, and enough values per channel to train on.
void check_batch_norm_bf16_forward(const Tensor& input, const Tensor& residual, const Tensor& weight,
                                   const Tensor& bias, const Tensor& running_mean,
                                   const Tensor& running_var, bool training, const char* op);
void check_batch_norm_bf16_backward(const Tensor& grad_output, const Tensor& input,
                                    const Tensor& weight, const Tensor& save_mean,
                                    const Tensor& save_invstd, const char* op);

// relu: max(y, 0); residual defined: max(y + residual, 0) (relu must be set with it).
// relu_bits not null, relu set and impl Bf16ChannelsLast: the ReLU's mask is also
// written there, (N H W, 2 * ceil(C / 16)) uint8 (Note [ReLU mask in bits] in
// autograd/functions/batch_norm.cpp); for any other impl it is left as it is.
std::tuple<Tensor, Tensor, Tensor> batch_norm_bf16_forward(
    const Tensor& input, const Tensor& residual, const Tensor& weight, const Tensor& bias,
    const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
    double eps, bool relu, const char* op, BatchNormImpl impl, Tensor* relu_bits = nullptr);

// mask: where the fused ReLU's mask comes from (batch_norm_detail::Mask): `output`
// for Mask::Output, `bias` for Mask::Input (undefined: 0), `output` the forward's
// relu_bits for Mask::Bits (Bf16ChannelsLast only). With grad_residual not
// null, the masked gradient (batch_norm_add_relu's residual gradient) is stored there.
std::tuple<Tensor, Tensor, Tensor> batch_norm_bf16_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& bias,
    const Tensor& save_mean, const Tensor& save_invstd, const Tensor& output,
    batch_norm_detail::Mask mask, bool training, bool need_input, bool need_weight,
    bool need_bias, Tensor* grad_residual, const char* op, BatchNormImpl impl);

// The two above for impl == Bf16ChannelsLast (a 4-d channels-last input), which
// they hand over after their checks (fast/batch_norm_bf16_nhwc.cpp); the other
// activation-shaped operands may be in either order, and the results are channels-last.
std::tuple<Tensor, Tensor, Tensor> batch_norm_bf16_nhwc_forward(
    const Tensor& input, const Tensor& residual, const Tensor& weight, const Tensor& bias,
    const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
    double eps, bool relu, const char* op, Tensor* relu_bits = nullptr);
std::tuple<Tensor, Tensor, Tensor> batch_norm_bf16_nhwc_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& bias,
    const Tensor& save_mean, const Tensor& save_invstd, const Tensor& output,
    batch_norm_detail::Mask mask, bool training, bool need_input, bool need_weight,
    bool need_bias, Tensor* grad_residual, const char* op);

// batch_norm_pair_forward / _backward (batch_norm_pair.h) for a channels-last bfloat16
// input and residual, after batch_norm_pair.cpp's checks
// (fast/batch_norm_bf16_nhwc_pair.cpp); mask is Mask::Bits or Mask::Output.
BatchNormPairForward batch_norm_bf16_nhwc_pair_forward(const Tensor& input, const BatchNormTensors& bn,
                                                       const Tensor& residual,
                                                       const BatchNormTensors& residual_bn,
                                                       bool training, double momentum, double eps,
                                                       Tensor* relu_bits, const char* op);
BatchNormPairGrads batch_norm_bf16_nhwc_pair_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& save_mean,
    const Tensor& save_invstd, const Tensor& residual, const Tensor& residual_weight,
    const Tensor& residual_save_mean, const Tensor& residual_save_invstd, const Tensor& mask_source,
    batch_norm_detail::Mask mask, bool training, const std::array<bool, 6>& need, const char* op);

}  // namespace lockstep::native
