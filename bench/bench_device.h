// bench/bench_device.h — what bench_step and bench_ddp both need to time work on
// a GPU: device_sync, so a clock read after it sees the kernels finished.
// Read before: core/cuda/cuda_context.h. Read next: bench/bench_step.cpp.
#pragma once

#include "core/device.h"

#if LOCKSTEP_WITH_CUDA
#include "core/cuda/cuda_context.h"
#endif

namespace lockstep::bench {

// Waits for the GPU's queued work (no-op on the CPU), so a clock read after it is real.
inline void device_sync(const Device& device) {
#if LOCKSTEP_WITH_CUDA
  if (device.is_cuda()) cuda::synchronize(device.index);
#else
  (void)device;
#endif
}

}  // namespace lockstep::bench
