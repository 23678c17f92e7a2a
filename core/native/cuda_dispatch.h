// core/native/cuda_dispatch.h — how a native op reaches its CUDA kernel.
//
// § Note [CUDA dispatch]
// Each public function in core/native/ is the CPU kernel; its first line is
//   LS_DISPATCH_CUDA(t, name(args...));
// which returns name(args...) from the CUDA kernel table (core/native/cuda_kernels.h)
// when tensor `t` lives on a CUDA device. The table is filled by lockstep's CUDA
// library when a program links it (Note [CUDA hooks] in core/cuda_hooks.h); without
// it no CUDA tensor can exist (the allocator and the factories throw first), and a
// lookup would throw naming the call. The CPU libraries are thus the same in a CPU-only
// and a CUDA build and reference no CUDA symbol. The CUDA functions have the same
// names and signatures as the native ones, declared once for both in
// core/native/kernel_api.h and kernel_api_nn.h (Note [Kernel API declared once]) and
// included into namespace cuda_native by core/cuda/cuda_native.h; they check that
// every input is on the same device (throwing an ls::Error that names the op and the
// devices) and queue their kernels on the current stream without synchronising the host.
// One rule, one line per op: a reader finds the CPU kernel in the function body and
// the CUDA kernel by the name in the macro (and in the table's list).
// Read before: core/native/native.h, core/native/cuda_kernels.h.
// Read next: core/cuda/cuda_native.h.
#pragma once

#include "core/native/cuda_kernels.h"

#define LS_DISPATCH_CUDA(t, call)                                    \
  do {                                                               \
    if ((t).defined() && (t).device().is_cuda()) {                   \
      return ::lockstep::native::cuda_kernels(#call).call;           \
    }                                                                \
  } while (0)
