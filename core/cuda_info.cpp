// core/cuda_info.cpp — ls::cuda::is_available() / device_count() for builds
// without the CUDA backend: no device can be used, so both say so.
// (The CUDA backend, under core/cuda/, replaces this file when built.)
// Read before: core/device.h.
#include "core/device.h"

namespace lockstep::cuda {

bool is_available() { return false; }
int device_count() { return 0; }

}  // namespace lockstep::cuda
