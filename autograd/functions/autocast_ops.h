// autograd/functions/autocast_ops.h — how the differentiable ops apply Note [Autocast policy].
//
// The public ops (linear, conv2d, matmul, softmax, ...) ask here first: when
// autocast is on, the lower-precision ops hand over to their bf16 forms below,
// and the float32 ops convert their bf16 inputs with float_input(). Outside a
// guard every function here is a no-op test.
// Read before: core/autocast.h, autograd/functions/functions.h.
// Read next: autograd/functions/autocast_ops.cpp, autograd/functions/autocast_ops_cuda.cpp.
#pragma once

#include "core/autocast.h"
#include "core/tensor.h"

namespace lockstep::autograd {

// True when autocast is on and these operands are ones the policy converts:
// defined floating tensors other than float64 (gradcheck's dtype is never
// autocast) on the CPU, or on a GPU in a CUDA build.
bool autocast_applies(std::initializer_list<const Tensor*> operands);

// A float32 op's input under autocast: t.to(kFloat32) when autocast is on and
// t is bfloat16 (recorded, so the gradient flows back as bf16); else t.
Tensor float_input(const Tensor& t);

// § Note [float32 ops reading bfloat16 in place]
// The policy computes softmax, log_softmax and cross_entropy in float32. Written as
// op(t.to(kFloat32)), a bf16 t is read and written again as a float32 copy (6 bytes
// an element) that the op then reads (4 more), and backward gains a ToCopyBackward
// that reads the float32 gradient and writes it rounded (6 more). For BERT-base's
// attention scores and its 30522-wide MLM logits that is ~830 MB a step (the
// profiler's bytes column, docs/results/bf16.md). Instead, on the CPU, these ops
// read the bf16 tensor itself, widening each row into float32 registers or into
// their float32 result, and their backward rounds dL/dt to bf16 as it writes it:
// the same float32 arithmetic on the same values, so results and gradients are
// bit for bit those of the cast (tests/autograd/test_bf16_in_place_ops.cpp checks
// them against it), with one node fewer (no ToCopyBackward). cross_entropy then
// saves the bf16 logits and two floats a row instead of float32 log-probabilities.
// LOCKSTEP_BF16_FUSED_CASTS=0 restores the casts (A/B runs).

// True when the float32 op under autocast should read `t` in place (the Note above):
// autocast on, t a bf16 CPU tensor, and LOCKSTEP_BF16_FUSED_CASTS not 0.
bool reads_bf16_in_place(const Tensor& t);

// A bf16 op's activation operand: t.to(kBFloat16) (recorded) under autocast.
Tensor bf16_input(const Tensor& t);

// The bf16 forms of linear and conv2d: float32 weight and bias as graph inputs,
// converted inside (Note [Autocast casts inside the op] in autocast_ops.cpp).
Tensor linear_autocast(const Tensor& input, const Tensor& weight, const Tensor& bias);
Tensor conv2d_autocast(const Tensor& input, const Tensor& weight, const Tensor& bias,
                       const IntList& stride, const IntList& padding, const IntList& dilation,
                       int64_t groups);

// § Note [linear + GELU in one node]
// A transformer's feed-forward computes gelu(x W^T + b). Under bf16 autocast on the
// CPU, TransformerEncoderLayer records it as ONE node: the GEMM writes u = x W^T + b
// (bias in the GEMM's sum), one pass writes gelu(u) with the kernel Tensor::gelu
// runs, and u is saved; backward forms dL/du = g * gelu'(u) with GeluBackward's
// kernel and goes on as linear's backward. The values are those of linear then
// gelu, bit for bit (tests/autograd/test_linear_gelu_fused.cpp), and the GELU's
// passes are those of the GEMM's node (one profiler row, marked G): BERT-base's
// separate gelu + GeluBackward rows moved 385 MB a step (docs/results/bf16.md).
// LOCKSTEP_BF16_LINEAR_GELU=0 records linear and gelu apart (A/B runs).
Tensor linear_gelu_autocast(const Tensor& input, const Tensor& weight, const Tensor& bias);
// Whether gelu(linear(input, weight, bias)) should take linear_gelu_autocast.
bool fuses_linear_gelu(const Tensor& input, const Tensor& weight, const Tensor& bias);

// § Note [dropout writing the bf16 copy]
// Attention's probabilities are float32 (softmax's row of the policy), dropped out,
// then read by a bf16 matmul, which would cast them: the dropout writes a float32
// tensor (4 bytes an element) that the cast reads again and writes as bf16, and
// backward widens the bf16 gradient in a ToCopyBackward before the dropout's own
// pass. Under autocast on the CPU, MultiheadAttention calls dropout_to_bf16
// instead: one pass reads the float32 probabilities and writes the dropped values
// rounded to bf16, the values of the dropout followed by the cast, bit for bit
// (same mask, same product, one rounding), and its backward widens the incoming
// gradient inside the dropout's pass. BERT-base: ~25 MB a layer and step.
// LOCKSTEP_BF16_DROPOUT_CAST=0 keeps dropout and cast apart (A/B runs).
Tensor dropout_to_bf16(const Tensor& input, double p, bool training);
// Whether MultiheadAttention should call dropout_to_bf16 on `probs`.
bool fuses_dropout_cast(const Tensor& probs);

// § Note [dropout + residual add in one pass]
// A post-norm transformer layer adds a dropped-out bf16 branch to its float32
// residual stream twice: x + dropout(y). As two ops the dropout writes a bf16 tensor
// that the add reads again, and backward has the add round dL/dh to bf16 into one
// tensor that the dropout's backward reads and writes again. Under autocast on the
// CPU TransformerEncoderLayer calls dropout_add: one pass reads x and y and writes
// h with the same mask, the same bf16 rounding of the dropped value and the same
// float32 add, so h is bit for bit x + dropout(y); backward returns dL/dh itself for
// x and, in one pass, dL/dy rounded and masked as the two nodes did
// (tests/autograd/test_bf16_in_place_ops.cpp). BERT-base: ~6 MB per residual and
// step, 24 residuals. LOCKSTEP_BF16_DROPOUT_ADD=0 keeps the two ops (A/B runs).
Tensor dropout_add(const Tensor& x, const Tensor& y, double p);  // training, 0 < p <= 1
// Whether x + dropout(y, p, training) should take dropout_add: autocast on, training,
// p > 0, x float32 and y bf16 of one shape on the CPU.
bool fuses_dropout_add(const Tensor& x, const Tensor& y, double p, bool training);

// Their forms for CUDA tensors (autocast_ops_cuda.cpp, in lockstep's CUDA library,
// which registers them as it loads: Note [CUDA hooks] in core/cuda_hooks.h; Note
// [Autocast on CUDA] in core/cuda/autocast_kernels.cu): linear_autocast and
// conv2d_autocast call these for a CUDA input.
struct AutocastCudaHooks {
  Tensor (*linear)(const Tensor& input, const Tensor& weight, const Tensor& bias) = nullptr;
  Tensor (*conv2d)(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
                   const IntList& padding, const IntList& dilation, int64_t groups) = nullptr;
};

}  // namespace lockstep::autograd
