// distributed/init.h — init_process_group: from "gloo" / "mpi" and the
// environment to a ready ProcessGroup.
//
//   auto pg = ls::distributed::init_process_group("gloo");   // under lockstep-run
//   auto pg = ls::distributed::init_process_group("mpi");    // under mpirun
//
// "gloo" runs the rendezvous (rendezvous_from_env: RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT or mpirun's variables, overridden by options) and
// connects a ProcessGroupGloo through the store. "mpi" initializes MPI and uses
// its world (explicit rank / world_size options must then agree with MPI's).
// "nccl" needs a CUDA build. With options.round_robin(K) > 1 the result is a
// ProcessGroupRoundRobin over K groups of the backend, each rendezvousing
// under its own store prefix. Every call installs the terminate handler of
// Note [TORCHELASTIC_ERROR_FILE] (distributed/error_file.h): a rank that dies of
// an uncaught ls::Error says why, on stderr and to torchrun / lockstep-run.
// Read before: distributed/rendezvous.h, distributed/process_group/process_group.h.
// Read next: distributed/ddp/distributed_data_parallel.h.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "distributed/process_group/process_group.h"
#include "distributed/rendezvous.h"

namespace lockstep::distributed {

std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend,
                                                 const InitOptions& options = {});

namespace detail {
// `groups` process groups of one backend, each made by `make` on its own prefix of the
// rendezvous store ("lockstep/pg<k>"); more than one are joined in a ProcessGroupRoundRobin
// (distributed/init.cpp; the NCCL backend's is distributed/init_cuda.cpp).
std::shared_ptr<ProcessGroup> make_groups(
    const RendezvousInfo& info, int groups,
    const std::function<std::shared_ptr<ProcessGroup>(std::shared_ptr<Store> store)>& make);
}  // namespace detail

}  // namespace lockstep::distributed
