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

#include "core/native/nn_kernels.h"

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

// adam_step_ (kernel_api_nn.h) on a CPU parameter with p16 as sgd_step_'s: the same
// pass writes the new p rounded to bf16 into it (Note [bf16 copies written by the
// optimizer]); adam_step_ is this with p16 undefined.
void adam_step_bf16_copy_(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                          const Tensor& v_max, double beta1, double beta2, double eps,
                          double step_size, double bc2_sqrt, double decay, double l2,
                          const Tensor& p16);

// adam_step_ and grad_norm_part, which have CUDA kernels too, are declared with
// their formulas in core/native/kernel_api_nn.h (Note [Kernel API declared once]).

}  // namespace lockstep::native
