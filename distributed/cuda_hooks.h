// distributed/cuda_hooks.h — the NCCL backend as init_process_group reaches it: a hook that
// lockstep's CUDA library registers as it loads (distributed/init_cuda.cpp; Note [CUDA hooks]
// in core/cuda_hooks.h). A program linked without lockstep::cuda has none, and
// init_process_group("nccl") says to link it. (Gloo's and MPI's host staging of CUDA tensors
// has its own hook: distributed/process_group/host_staging_set.h.)
// Read before: core/cuda_hooks.h, distributed/init.h.
// Read next: distributed/init_cuda.cpp.
#pragma once

#include <memory>

#include "core/cuda_hooks.h"

namespace lockstep::distributed {

class ProcessGroup;
class InitOptions;

struct NcclBackendHooks {
  // init_process_group("nccl"): `groups` NCCL groups (round-robin when more than one).
  std::shared_ptr<ProcessGroup> (*make_nccl)(const InitOptions& options, int groups) = nullptr;
};

}  // namespace lockstep::distributed
