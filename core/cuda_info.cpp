// core/cuda_info.cpp — ls::cuda::is_available() / device_count() for builds
// without the CUDA backend: no device can be used, so both say so.
// (The CUDA backend, core/cuda/cuda_context.cpp, defines them when built.)
// Read before: core/device.h.
#include "core/device.h"

#if !LOCKSTEP_WITH_CUDA
namespace lockstep::cuda {

bool is_available() { return false; }
int device_count() { return 0; }

}  // namespace lockstep::cuda
#endif
