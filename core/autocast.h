// core/autocast.h — automatic mixed precision: AutocastGuard and the cast policy.
//
// Under `ls::AutocastGuard amp(ls::kBFloat16);` the ops below choose the dtype
// they compute in, as torch.autocast does; outside any guard nothing changes.
// The state is per thread (like GradMode); guards nest and the innermost decides,
// so `AutocastGuard off(ls::kBFloat16, /*enabled=*/false)` inside an enabled
// guard runs its ops exactly as without autocast.
//
// § Note [Autocast policy]
// Each op applies its row of this table where it is defined (autograd/functions/):
//
//   op                                    inputs computed in       returns
//   conv2d, linear                        bfloat16 (fp32 accum.)   bfloat16
//   matmul, bmm (attention's products)    bfloat16 (fp32 accum.)   bfloat16
//   softmax, log_softmax                  float32                  float32
//   layer_norm                            float32                  float32
//   batch_norm (+ fused ReLU and add +    its input's dtype:       its input's dtype
//     ReLU forms)                         bf16 activations, fp32
//                                         weight, statistics and
//                                         arithmetic (Note [bfloat16
//                                         batch norm])
//   cross_entropy, mse_loss, nll_loss,    float32                  float32
//     binary_cross_entropy(_with_logits),
//     smooth_l1_loss (core/losses.h)
//   lstm_cell, gru_cell, LSTM, GRU        GEMMs bfloat16, gates    float32 (the
//     (nn/rnn_cell.h)                     and states float32       parameters' dtype)
//   TransformerEncoder(Layer)             the rows of its ops: linear, matmul, softmax,
//                                         layer_norm, gelu/relu, dropout, add
//   everything else (add, mul, relu,      the inputs' own dtypes   promote_types of the
//     gelu, dropout, pooling, views...)   (bf16 computes in fp32   inputs: bf16 + fp32
//                                         registers, rounded once) is fp32
//
// Parameters, their .grad and the optimizer's state stay float32 ("master
// weights"): conv2d and linear take the float32 weight and bias as their graph
// inputs and convert inside (Note [Autocast casts inside the op] in
// autograd/functions/autocast_ops.cpp), so their weight gradient is computed
// and returned in float32; matmul and bmm cast their operands with the
// differentiable Tensor::to, whose backward converts the gradient back.
// Each parameter's bfloat16 copy is made once per outermost guard and reused
// (the cast cache below): a weight used by several ops, or by every step of a
// gradient-accumulation loop inside one guard, is converted once.
//
// Only bfloat16 is supported (the CPU's AMX / AVX-512-BF16 type and the CUDA
// tensor cores'); float16 autocast would need loss scaling, which bf16's float32
// exponent range makes unnecessary.
//
// CUDA tensors follow the same table in a CUDA build: linear and conv2d record the
// same nodes' GPU form (autograd/functions/autocast_ops_cuda.cpp) over cuBLAS
// bf16 GEMMs and cuDNN bf16 convolutions, the other ops' CUDA kernels take bf16
// (Note [Autocast on CUDA] in core/cuda/autocast_kernels.cu; one difference:
// conv2d's weight gradient is rounded to bf16 before it is widened to float32).
// The cast cache below works for tensors on any device.
//
// Read before: core/grad_mode.h, core/dtype.h. Read next: autograd/functions/autocast_ops.cpp.
#pragma once

#include "core/tensor.h"

namespace lockstep {

// RAII: turns autocast on (or, with enabled == false, off) on this thread until
// destroyed. The cast cache is cleared when the outermost enabled guard ends.
class AutocastGuard {
 public:
  explicit AutocastGuard(ScalarType dtype = kBFloat16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool previous_enabled_;
  ScalarType previous_dtype_;
  bool counted_;  // this guard is enabled: it counts in the cache's lifetime
};

// Whether ops on this thread follow Note [Autocast policy] now.
bool is_autocast_enabled();
// The lower-precision dtype of the innermost guard (kBFloat16).
ScalarType autocast_dtype();

namespace autocast {

// `t` converted to `dtype` without recording autograd history (the ops that
// call it record their own node). A parameter (a float leaf that requires grad)
// is converted once per outermost guard and the copy reused while its storage
// version is unchanged; any other tensor is converted each time. t itself when
// it already has that dtype.
Tensor cached_cast(const Tensor& t, ScalarType dtype);

// cached_cast(t, dtype) transposed into a contiguous (t.size(1), t.size(0))
// tensor, cached per guard alike (its own entries, not counted by cache_size).
// linear's forward reads its weight this way only with LOCKSTEP_BF16_LINEAR_WT_COPY=1
// (A/B runs): by default the GEMM takes cached_cast's copy as a transposed
// operand, which is as fast and saves the second cast (Note [linear's weight as a
// transposed operand] in autograd/functions/autocast_ops.cpp).
Tensor cached_cast_transposed(const Tensor& t, ScalarType dtype);

// True when autocast is on and t is a floating tensor of another float dtype
// that the policy's `dtype` should replace (int tensors are never cast).
bool needs_cast(const Tensor& t, ScalarType dtype);

// Entries in the cast cache of this thread (tests).
size_t cache_size();

// § Note [bf16 copies written by the optimizer]
// A parameter's bf16 copy is made by the first forward under autocast that
// uses it, and kept past the guard (one per parameter, process-wide, not
// keeping the parameter alive). The optimizer asks for it with
// kept_cast_to_write(p) and, in the same pass that updates the float32 p,
// writes the new values rounded to bf16 into it (native::sgd_step_'s p16), then
// calls kept_cast_written(p): the next forward finds a copy of p's current
// version and converts nothing. So each weight is read from memory once per
// step (by the optimizer) instead of twice (optimizer, then the next
// forward's cast). A copy someone else still holds (a graph kept with
// retain_graph, a forward that runs inside the guard the step is in) is never
// written: the optimizer gets a fresh buffer. Without a step that writes it, a
// kept copy is replaced by the next forward's cast as before (the version
// check). LOCKSTEP_BF16_KEEP_CASTS=0 keeps no copies (A/B runs).

// The bf16 tensor the optimizer should fill with p's next values, or an
// undefined tensor when p has no kept bf16 copy (never cast under autocast, or
// kept copies are off). Until kept_cast_written(p), no forward reads it.
Tensor kept_cast_to_write(const Tensor& p);
// The buffer of kept_cast_to_write(p) now holds p's values at p's current version.
void kept_cast_written(const Tensor& p);
// Parameters with a kept bf16 copy (tests).
size_t kept_cast_count();

}  // namespace autocast

}  // namespace lockstep
