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

// A bf16 op's activation operand: t.to(kBFloat16) (recorded) under autocast.
Tensor bf16_input(const Tensor& t);

// The bf16 forms of linear and conv2d: float32 weight and bias as graph inputs,
// converted inside (Note [Autocast casts inside the op] in autocast_ops.cpp).
Tensor linear_autocast(const Tensor& input, const Tensor& weight, const Tensor& bias);
Tensor conv2d_autocast(const Tensor& input, const Tensor& weight, const Tensor& bias,
                       const IntList& stride, const IntList& padding, const IntList& dilation,
                       int64_t groups);

#if LOCKSTEP_WITH_CUDA
// Their forms for CUDA tensors (autocast_ops_cuda.cpp; Note [Autocast on CUDA] in
// core/cuda/autocast_kernels.cu): linear_autocast and conv2d_autocast call these.
Tensor linear_autocast_cuda(const Tensor& input, const Tensor& weight, const Tensor& bias);
Tensor conv2d_autocast_cuda(const Tensor& input, const Tensor& weight, const Tensor& bias,
                            const IntList& stride, const IntList& padding,
                            const IntList& dilation, int64_t groups);
#endif

}  // namespace lockstep::autograd
