// distributed/init.cpp — backend name -> ProcessGroup.
// Read before: distributed/init.h.
#include "distributed/init.h"

#include <vector>

#include "distributed/error_file.h"
#include "distributed/oversubscription.h"
#include "distributed/store/prefix_store.h"
#include "distributed/process_group/process_group_gloo.h"
#include "distributed/process_group/process_group_mpi.h"
#include "distributed/process_group/process_group_round_robin.h"
#if LOCKSTEP_WITH_CUDA
#include "core/cuda/cuda_context.h"
#include "distributed/process_group/cuda/process_group_nccl.h"
#endif

namespace lockstep::distributed {
namespace {

std::shared_ptr<ProcessGroup> make_gloo(const InitOptions& options, int groups) {
  RendezvousInfo info = rendezvous_from_env(options);
  ProcessGroupGloo::Options gloo_options;
  gloo_options.timeout = info.timeout;
  gloo_options.master_addr = info.master_addr;
  std::vector<std::shared_ptr<ProcessGroup>> pgs;
  for (int k = 0; k < groups; ++k) {
    auto store = std::make_shared<PrefixStore>(lockstep::detail::str("lockstep/pg", k), info.store);
    pgs.push_back(std::make_shared<ProcessGroupGloo>(store, info.rank, info.world_size, gloo_options));
  }
  if (groups == 1) return pgs[0];
  auto round_robin = std::make_shared<ProcessGroupRoundRobin>(std::move(pgs));
  // Its own prefix: users of ProcessGroup::store() (DDP's progress board) do
  // not mix their keys with the member groups' rendezvous.
  round_robin->set_store(std::make_shared<PrefixStore>("lockstep/pg_round_robin", info.store));
  return round_robin;
}

std::shared_ptr<ProcessGroup> make_mpi(const InitOptions& options, int groups) {
  std::vector<std::shared_ptr<ProcessGroup>> pgs;
  for (int k = 0; k < groups; ++k) pgs.push_back(ProcessGroupMPI::create());
  const auto& pg = pgs[0];
  LS_CHECK(!options.rank() || *options.rank() == pg->rank(), "init_process_group(\"mpi\"): options ask "
           "for rank ", options.rank().value_or(-1), " but MPI says this process is rank ", pg->rank(),
           "; under mpirun leave rank unset");
  LS_CHECK(!options.world_size() || *options.world_size() == pg->size(), "init_process_group(\"mpi\"): "
           "options ask for world_size ", options.world_size().value_or(-1), " but MPI's world has ",
           pg->size(), " processes (mpirun -np); leave world_size unset");
  // Bounds DDP's waits (MPI itself has no per-operation timeout): the option,
  // else LOCKSTEP_TIMEOUT_S, else 300 s — as for Gloo.
  const auto timeout = options.timeout() ? *options.timeout() : default_timeout();
  for (auto& g : pgs) g->set_timeout(timeout);
  if (groups == 1) return pgs[0];
  return std::make_shared<ProcessGroupRoundRobin>(std::move(pgs));
}

#if LOCKSTEP_WITH_CUDA
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
  std::vector<std::shared_ptr<ProcessGroup>> pgs;
  for (int k = 0; k < groups; ++k) {
    auto store = std::make_shared<PrefixStore>(lockstep::detail::str("lockstep/pg", k), info.store);
    pgs.push_back(std::make_shared<ProcessGroupNCCL>(store, info.rank, info.world_size, nccl_options));
  }
  if (groups == 1) return pgs[0];
  auto round_robin = std::make_shared<ProcessGroupRoundRobin>(std::move(pgs));
  round_robin->set_store(std::make_shared<PrefixStore>("lockstep/pg_round_robin", info.store));
  return round_robin;
}
#endif

}  // namespace

std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend, const InitOptions& options) {
  install_terminate_handler();  // Note [TORCHELASTIC_ERROR_FILE]: an uncaught ls::Error is reported
  detail::warn_if_oversubscribed();  // Note [Oversubscribed ranks]: spinning OpenMP threads
  const int groups = options.round_robin();
  LS_CHECK(groups >= 1, "init_process_group: round_robin(", groups, ") must ask for at least 1 group");
  if (backend == "gloo") return make_gloo(options, groups);
  if (backend == "mpi") return make_mpi(options, groups);
  if (backend == "nccl") {
#if LOCKSTEP_WITH_CUDA
    return make_nccl(options, groups);
#else
    throw Error("init_process_group: backend 'nccl' needs lockstep built with CUDA and NCCL, but this build is "
                "CPU-only (configured with LOCKSTEP_CUDA=OFF or without nvcc); rebuild with -DLOCKSTEP_CUDA=ON "
                "on a machine with the CUDA toolkit and NCCL, or use \"gloo\" (or \"mpi\" under mpirun)");
#endif
  }
  throw Error(lockstep::detail::str("init_process_group: unknown backend '", backend,
                          "'; valid backends are \"gloo\", \"mpi\" and \"nccl\" (CUDA builds)"));
}

}  // namespace lockstep::distributed
