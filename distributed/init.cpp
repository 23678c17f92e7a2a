// distributed/init.cpp — backend name -> ProcessGroup.
// Read before: distributed/init.h.
#include "distributed/init.h"

#include <vector>

#include "distributed/cuda_hooks.h"
#include "distributed/error_file.h"
#include "distributed/oversubscription.h"
#include "distributed/store/prefix_store.h"
#include "distributed/process_group/process_group_gloo.h"
#include "distributed/process_group/process_group_mpi.h"
#include "distributed/process_group/process_group_round_robin.h"

namespace lockstep::distributed {
namespace {

std::shared_ptr<ProcessGroup> make_gloo(const InitOptions& options, int groups) {
  RendezvousInfo info = rendezvous_from_env(options);
  ProcessGroupGloo::Options gloo_options;
  gloo_options.timeout = info.timeout;
  gloo_options.master_addr = info.master_addr;
  return detail::make_groups(info, groups, [&](std::shared_ptr<Store> store) {
    return std::make_shared<ProcessGroupGloo>(std::move(store), info.rank, info.world_size, gloo_options);
  });
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

}  // namespace

std::shared_ptr<ProcessGroup> detail::make_groups(
    const RendezvousInfo& info, int groups,
    const std::function<std::shared_ptr<ProcessGroup>(std::shared_ptr<Store> store)>& make) {
  std::vector<std::shared_ptr<ProcessGroup>> pgs;
  for (int k = 0; k < groups; ++k) {
    pgs.push_back(make(std::make_shared<PrefixStore>(lockstep::detail::str("lockstep/pg", k), info.store)));
  }
  if (groups == 1) return pgs[0];
  auto round_robin = std::make_shared<ProcessGroupRoundRobin>(std::move(pgs));
  // Its own prefix: users of ProcessGroup::store() (DDP's progress board) do
  // not mix their keys with the member groups' rendezvous.
  round_robin->set_store(std::make_shared<PrefixStore>("lockstep/pg_round_robin", info.store));
  return round_robin;
}

std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend, const InitOptions& options) {
  install_terminate_handler();  // Note [TORCHELASTIC_ERROR_FILE]: an uncaught ls::Error is reported
  detail::warn_if_oversubscribed();  // Note [Oversubscribed ranks]: spinning OpenMP threads
  const int groups = options.round_robin();
  LS_CHECK(groups >= 1, "init_process_group: round_robin(", groups, ") must ask for at least 1 group");
  if (backend == "gloo") return make_gloo(options, groups);
  if (backend == "mpi") return make_mpi(options, groups);
  if (backend == "nccl") {
    // The NCCL backend is in lockstep's CUDA library (Note [CUDA hooks] in core/cuda_hooks.h).
    const auto* hooks = lockstep::detail::cuda_hooks_or_null<NcclBackendHooks>();
    if (hooks == nullptr) {
      throw Error(lockstep::detail::cuda_library_missing(
          "init_process_group: backend 'nccl' needs lockstep built with CUDA and NCCL") +
          "; without GPUs use \"gloo\" (or \"mpi\" under mpirun)");
    }
    return hooks->make_nccl(options, groups);
  }
  throw Error(lockstep::detail::str("init_process_group: unknown backend '", backend,
                          "'; valid backends are \"gloo\", \"mpi\" and \"nccl\" (CUDA builds)"));
}

}  // namespace lockstep::distributed
