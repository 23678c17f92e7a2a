// core/cuda_hooks.h — how lockstep's CPU libraries reach its CUDA library without
// linking it: tables of function pointers that the CUDA library fills when it loads.
//
// § Note [CUDA hooks]
// The CPU libraries (lockstep_core ... lockstep_models) are compiled the same in a CPU-only
// and in a CUDA build, and reference no symbol of CUDA: every place where CPU code would
// call CUDA code calls through a hooks table instead, as PyTorch's CUDA hooks do:
//   CudaRuntimeHooks (below)        device count, synchronize, the caching allocator;
//   native::CudaKernels             one slot per LS_DISPATCH_CUDA kernel (core/native/cuda_kernels.h);
//   autograd::AutocastCudaHooks     autocast's CUDA linear and conv2d (autograd/functions/autocast_ops.h);
//   distributed::NcclBackendHooks   init_process_group("nccl") (distributed/cuda_hooks.h);
//   distributed::detail::HostStagingHooks  Gloo's and MPI's host staging of CUDA tensors
//                                   (distributed/process_group/host_staging_set.h).
// Each table is a plain struct; the CUDA library (lockstep_cuda_kernels: core/cuda/,
// autograd/functions/autocast_ops_cuda.cpp, distributed/process_group/cuda/,
// distributed/init_cuda.cpp) registers one of each from a static registrar, a
// namespace-scope variable whose initializer calls register_cuda_hooks, as it is loaded. The archive is linked whole by lockstep::cuda
// (Note [CUDA component] in cmake/LockstepInstall.cmake), since nothing references a
// registrar and a linker drops unreferenced archive members. A program linked without it
// has no table registered: asking for one throws the error of cuda_library_missing, which
// names lockstep::cuda, and the queries that merely ask (cuda::is_available) answer "no".
// The slot of each table is a function-local static pointer, constant-initialised to
// nullptr, so a registrar may run before or after any other static initialiser.
// Read before: core/device.h, core/allocator.h.
// Read next: core/native/cuda_kernels.h, core/cuda/cuda_context.cpp (a registrar).
#pragma once

#include <string>

#include "core/error.h"

namespace lockstep {

class Allocator;

namespace detail {

// What a CPU library says when a CUDA device is used by a program without lockstep's CUDA
// library; `what` names the call ("factory: device cuda:0").
std::string cuda_library_missing(const std::string& what);

// The slot of hooks table `Hooks`: nullptr until the CUDA library registers one.
template <class Hooks>
const Hooks*& cuda_hooks_slot() {
  static const Hooks* registered = nullptr;
  return registered;
}

// Called by the CUDA library's registrars; `hooks` must live as long as the program.
template <class Hooks>
bool register_cuda_hooks(const Hooks& hooks) {
  cuda_hooks_slot<Hooks>() = &hooks;
  return true;
}

// The registered table, or nullptr in a program linked without lockstep::cuda.
template <class Hooks>
const Hooks* cuda_hooks_or_null() {
  return cuda_hooks_slot<Hooks>();
}

// The registered table; throws cuda_library_missing(what) when there is none.
template <class Hooks>
const Hooks& cuda_hooks(const char* what) {
  const Hooks* hooks = cuda_hooks_slot<Hooks>();
  if (hooks == nullptr) throw Error(cuda_library_missing(what));
  return *hooks;
}

}  // namespace detail

// The CUDA runtime as core uses it (core/cuda/cuda_context.cpp registers it).
struct CudaRuntimeHooks {
  int (*device_count)() = nullptr;           // visible devices, 0 without a driver
  void (*synchronize)(int device) = nullptr;  // waits for the device's current stream
  Allocator& (*allocator)() = nullptr;        // the caching allocator (core/cuda/cuda_allocator.h)
};

}  // namespace lockstep
