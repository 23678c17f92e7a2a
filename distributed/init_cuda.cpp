// distributed/init_cuda.cpp — init_process_group("nccl"), part of lockstep's CUDA library
// (Note [CUDA build]), registered as it loads (distributed/cuda_hooks.h; the static
// registrar of Note [CUDA hooks] in core/cuda_hooks.h).
// Read before: distributed/init.cpp, distributed/process_group/cuda/process_group_nccl.h.
// Read next: distributed/process_group/cuda/host_staging.h.
#include <memory>

#include "core/cuda/cuda_context.h"
#include "distributed/cuda_hooks.h"
#include "distributed/init.h"
#include "distributed/process_group/cuda/process_group_nccl.h"

namespace lockstep::distributed {
namespace {

// One NCCL communicator per group, on device LOCAL_RANK modulo the visible
// devices (torchrun's convention: one process per GPU of a node), which also
// becomes the calling thread's current device.
std::shared_ptr<ProcessGroup> make_nccl(const InitOptions& options, int groups) {
  LS_CHECK(cuda::is_available(), "init_process_group: backend 'nccl' needs lockstep built with CUDA and a GPU; "
           "this build has CUDA but no CUDA device is visible to this process (ls::cuda::is_available() is "
           "false): use \"gloo\" without GPUs, or check the driver and CUDA_VISIBLE_DEVICES");
  RendezvousInfo info = rendezvous_from_env(options);
  ProcessGroupNCCL::Options nccl_options;
  nccl_options.timeout = info.timeout;
  nccl_options.device = info.local_rank % cuda::device_count();
  cuda::set_device(nccl_options.device);
  return detail::make_groups(info, groups, [&](std::shared_ptr<Store> store) {
    return std::make_shared<ProcessGroupNCCL>(std::move(store), info.rank, info.world_size, nccl_options);
  });
}

// The static registrar (Note [CUDA hooks]).
const NcclBackendHooks nccl_hooks{&make_nccl};
const bool nccl_hooks_registered = lockstep::detail::register_cuda_hooks(nccl_hooks);

}  // namespace
}  // namespace lockstep::distributed
