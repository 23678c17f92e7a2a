// core/native/optim_step.h — the optimizers' fused per-parameter steps as native ops:
// one pass over a parameter's contiguous memory (and its gradient and state), no
// temporaries. Like every native op, each reaches its CUDA kernel through
// Note [CUDA dispatch] in cuda_dispatch.h (to core/cuda/optim_kernels.cu), so optim/
// never names a device; both run the element formulas of Note [Shared optimizer updates].
//
// Operands: p, g and the state tensors are contiguous, of one floating dtype (float32
// or float64), on one device, with p's numel; fused_step_ok(p) says whether p qualifies
// (optim/ falls back to tensor ops otherwise). Every update writes p in place; the caller
// bumps p's version (the writes go through raw pointers).
// Read before: core/native/optim_update.h, optim/optimizer.h. Read next: optim/sgd.cpp.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace lockstep::native {

// Elements per chunk when an update or a norm is split across intra-op threads.
inline constexpr int64_t kOptimGrain = int64_t{1} << 15;

// p is contiguous float32/float64 on the CPU or a CUDA device.
bool fused_step_ok(const Tensor& p);

// SGD (optim/sgd.h): d = g + weight_decay * p; with momentum != 0: buf = first ? d :
// momentum * buf + (1 - dampening) * d, d = nesterov ? d + momentum * buf : buf; then
// p -= lr * d. buf may be undefined when momentum == 0; `first`: the parameter's first step.
// p16: undefined, or a contiguous bfloat16 tensor of p's numel (CPU, float32 p) that the
// same pass fills with the new p rounded to bf16 (Note [bf16 copies written by the
// optimizer] in core/autocast.h).
void sgd_step_(const Tensor& p, const Tensor& g, const Tensor& buf, double lr, double momentum,
               double dampening, double weight_decay, bool nesterov, bool first,
               const Tensor& p16 = Tensor());

// Adam / AdamW (optim/adam.h) with step t's scalars computed in double by the caller:
// step_size = lr / (1 - beta1^t), bc2_sqrt = sqrt(1 - beta2^t), decay (AdamW: 1 - lr wd,
// else 1), l2 (Adam: wd, else 0). p *= decay; grad = g + l2 p; m = b1 m + (1 - b1) grad;
// v = b2 v + (1 - b2) grad^2; v_max = max(v_max, v) when amsgrad (v_max defined; it then
// stands for v below); p -= step_size m / (sqrt(v) / bc2_sqrt + eps).
void adam_step_(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                const Tensor& v_max, double beta1, double beta2, double eps, double step_size,
                double bc2_sqrt, double decay, double l2);

// sum |g|^norm_type (max |g| when norm_type is infinite) over a float32/float64 tensor, in
// double. On the CPU, blocks of kOptimGrain elements are summed separately and combined in
// block order, so the result does not depend on the thread count.
double grad_norm_part(const Tensor& g, double norm_type);

}  // namespace lockstep::native
