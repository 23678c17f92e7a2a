// core/native/cuda_dispatch.h — how a native op reaches its CUDA kernel.
//
// § Note [CUDA dispatch]
// Each public function in core/native/ is the CPU kernel; its first line is
//   LS_DISPATCH_CUDA(t, name(args...));
// which, in a build with the CUDA backend, returns ls::cuda_native::name(args...)
// when tensor `t` lives on a CUDA device, and in a CPU-only build is nothing (no
// CUDA tensor can exist there: the CUDA allocator is never registered). The
// CUDA functions have the same names and signatures as the native ones, declared
// once for both in core/native/kernel_api.h and kernel_api_nn.h (Note [Kernel API
// declared once]) and included into namespace cuda_native by
// core/cuda/cuda_native.h; they check that every input is on the
// same device (throwing an ls::Error that names the op and the devices) and
// queue their kernels on the current stream without synchronising the host.
// One rule, one line per op: a reader finds the CPU kernel in the function
// body and the CUDA kernel by the name in the macro.
// Read before: core/native/native.h, core/cuda/cuda_context.h.
// Read next: core/cuda/cuda_native.h.
#pragma once

#if LOCKSTEP_WITH_CUDA
#include "core/cuda/cuda_native.h"
#define LS_DISPATCH_CUDA(t, call)                                    \
  do {                                                               \
    if ((t).defined() && (t).device().is_cuda()) {                   \
      return ::lockstep::cuda_native::call;                          \
    }                                                                \
  } while (0)
#else
#define LS_DISPATCH_CUDA(t, call) \
  do {                            \
    (void)(t);                    \
  } while (0)
#endif
