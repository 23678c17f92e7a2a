// core/cuda/cuda_kernels_registrar.cpp — fills the CUDA kernel table that LS_DISPATCH_CUDA
// calls through (core/native/cuda_kernels.h) with the kernels of core/cuda/, and registers it
// as this library loads (the static registrar of Note [CUDA hooks] in core/cuda_hooks.h).
// Read before: core/native/cuda_kernels.h, core/cuda/cuda_native.h.
// Read next: core/cuda/cuda_context.cpp (the runtime hooks' registrar).
#include "core/cuda/cuda_native.h"
#include "core/native/cuda_kernels.h"

namespace lockstep::cuda_native {
namespace {

native::CudaKernels make_kernels() {
  native::CudaKernels k;
#define LS_CUDA_KERNEL_FILL(name) k.name = &::lockstep::cuda_native::name;
  LS_CUDA_KERNELS(LS_CUDA_KERNEL_FILL)
#undef LS_CUDA_KERNEL_FILL
  k.sgd_step_ = &::lockstep::cuda_native::sgd_step_;
  return k;
}

const native::CudaKernels kernels = make_kernels();
const bool kernels_registered = lockstep::detail::register_cuda_hooks(kernels);

}  // namespace
}  // namespace lockstep::cuda_native
