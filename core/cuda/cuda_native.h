// core/cuda/cuda_native.h — the CUDA kernels of the basic ops: same names and
// signatures as their CPU kernels in core/native/native.h (Note [CUDA dispatch]
// in core/native/cuda_dispatch.h explains how a call gets here).
//
// Each function checks that its tensors share one CUDA device (throwing an
// ls::Error naming the op and the devices), makes that device current for the
// call, and queues its kernels on cuda::current_stream(device) without
// synchronising the host. The exceptions, which must hand a value to the host:
// allclose and equal (they return a bool) and copy_ into CPU memory.
// Their declarations and contracts are the CPU kernels', written once in
// core/native/kernel_api.h and included below (Note [Kernel API declared once]).
//   memory.cu       empty, zeros, fill_, copy_ (also CPU <-> CUDA), contiguous, clone, to_dtype
//   index.cu        index_select, index_add_, cat
//   elementwise.cu  binary ops, scalar ops, comparisons, where, allclose, equal
//   unary.cu        unary math, pow, relu/gelu backward
//   reduce.cu       sum, mean, max/min (+ indices), argmax/argmin, sum_to
//   softmax.cu      softmax, log_softmax and their backward
// Views need no kernel: they only change sizes/strides/offset (core/native/views.cpp).
// Read before: core/native/kernel_api.h, core/cuda/cuda_loops.cuh.
// Read next: core/cuda/memory.cu, core/cuda/cuda_native_nn.h.
#pragma once

#include <tuple>
#include <vector>

#include "core/native/native.h"

namespace lockstep::cuda_native {

using native::BinaryOp;
using native::CompareOp;
using native::UnaryOp;

// ---- the kernels both backends implement (Note [Kernel API declared once]) ----
#include "core/native/kernel_api.h"

}  // namespace lockstep::cuda_native

#include "core/cuda/cuda_native_nn.h"
