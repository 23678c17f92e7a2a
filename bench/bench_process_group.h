// bench/bench_process_group.h — the process group of bench_ddp and bench_overlap: the one a
// launcher describes (lockstep-run, torchrun-style variables, or mpirun), or, without one, a
// world of 1 over an in-process store, so that either program also runs alone.
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

}  // namespace lockstep::bench
