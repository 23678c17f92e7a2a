// bench/bench_process_group.h — the process group of bench_ddp and bench_overlap: the one a
// launcher describes (lockstep-run, torchrun-style variables, or mpirun), or, without one, a
// world of 1 over an in-process store, so that either program also runs alone; and a second
// group of the same ranks whose collectives are not fingerprinted (bench_overlap's ddp-nochecks).
// Read before: distributed/distributed.h. Used by: bench/bench_ddp.cpp, bench/bench_overlap.cpp.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>

#include "distributed/distributed.h"

namespace lockstep::bench {

// `rr` > 1 wraps that many groups in ProcessGroupRoundRobin (InitOptions().round_robin).
inline std::shared_ptr<distributed::ProcessGroup> make_process_group(const std::string& backend, int rr = 1) {
  distributed::InitOptions init = distributed::InitOptions().round_robin(rr);
  const bool launched = std::getenv("RANK") != nullptr || std::getenv("OMPI_COMM_WORLD_RANK") != nullptr ||
                        std::getenv("PMI_RANK") != nullptr;
  if (!launched && backend != "mpi") {
    init = init.rank(0).world_size(1).store(std::make_shared<distributed::HashStore>());
  }
  return distributed::init_process_group(backend, init);
}

// A second group of `pg`'s ranks that fingerprints only its first collective
// (check_every_collective = false; Note [Collective fingerprints]), so that a DDP built on it
// runs without the default collective checks while `pg` keeps them. Gloo: it rendezvouses
// under its own prefix of `pg`'s store; MPI: another group over MPI_COMM_WORLD. Collective:
// every rank calls it, in the same order relative to `pg`'s collectives.
// LOCKSTEP_COLLECTIVE_CHECKS=1 or LOCKSTEP_DISTRIBUTED_DEBUG still turn the checks on.
// In shared memory (Gloo's default on one host) every chunk carries its fingerprint
// whatever the option (Note [Shared memory on one host]): there only the batched exchange of
// TCP (LOCKSTEP_SHM=0) and MPI is what the option removes.
inline std::shared_ptr<distributed::ProcessGroup> make_unchecked_group(const distributed::ProcessGroup& pg,
                                                                       const std::string& backend) {
  if (backend == "mpi") {
    auto group = distributed::ProcessGroupMPI::create(distributed::ProcessGroupMPI::Options{false});
    group->set_timeout(pg.timeout());
    return group;
  }
  distributed::ProcessGroupGloo::Options options;
  options.timeout = pg.timeout();
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr) options.master_addr = addr;
  options.check_every_collective = false;
  auto store = std::make_shared<distributed::PrefixStore>("bench/unchecked_pg", pg.store());
  return std::make_shared<distributed::ProcessGroupGloo>(store, pg.rank(), pg.size(), options);
}

}  // namespace lockstep::bench
