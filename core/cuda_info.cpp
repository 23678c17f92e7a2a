// core/cuda_info.cpp — ls::cuda::is_available() / device_count(), answered through the CUDA
// runtime hooks (Note [CUDA hooks] in core/cuda_hooks.h): a program linked without
// lockstep::cuda has no device; and the message every CPU library gives then.
// Read before: core/device.h, core/cuda_hooks.h.
#include "core/cuda_hooks.h"
#include "core/device.h"

namespace lockstep {

namespace detail {
std::string cuda_library_missing(const std::string& what) {
  return str(what, ": no CUDA: this program was linked without lockstep's CUDA library; link lockstep::cuda "
             "(find_package(lockstep REQUIRED COMPONENTS CUDA), from a lockstep built with "
             "-DLOCKSTEP_CUDA=ON on a machine with the CUDA toolkit), or use ls::Device::cpu()");
}
}  // namespace detail

namespace cuda {

bool is_available() { return device_count() > 0; }

int device_count() {
  const CudaRuntimeHooks* hooks = lockstep::detail::cuda_hooks_or_null<CudaRuntimeHooks>();
  return hooks != nullptr ? hooks->device_count() : 0;
}

}  // namespace cuda
}  // namespace lockstep
