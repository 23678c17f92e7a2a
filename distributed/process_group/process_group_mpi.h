// distributed/process_group/process_group_mpi.h — ProcessGroup over MPI (OpenMPI), for
// programs started with `mpirun -np N prog`.
//
// § Note [One MPI thread]
// MPI is initialized once per process with MPI_THREAD_SERIALIZED, and from then
// on every MPI call of every ProcessGroupMPI — init, communicator setup, the
// collectives, MPI_Finalize at exit — runs on one process-wide worker thread
// (a detail::WorkQueue). Each group owns a duplicate of MPI_COMM_WORLD for its
// collectives (and a second one for their fingerprint exchanges, Note
// [Fingerprints exchanged ahead over MPI]); because all groups share the thread,
// collectives of several groups (round-robin) run in the one order the program
// issued them on every rank, which MPI requires. The caller gets a Work at once
// and keeps computing.
//
// f16/bf16 reduce through user-defined MPI_Ops that combine in f32 (the same
// kernels as Gloo, distributed/process_group/reduce_kernels.h); AVG is SUM then a division.
// MPI has no per-operation timeout: Work::wait(timeout) bounds the caller's
// wait, and mpirun ends the job when a rank dies. Errors come back as return
// codes (MPI_ERRORS_RETURN) and become ls::Error naming the collective.
// Read before: distributed/process_group/process_group_gloo.h (same shape),
// distributed/process_group/work_queue.h.
// Read next: distributed/process_group/process_group_mpi_fingerprints.h,
// distributed/process_group/process_group_round_robin.h.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "distributed/process_group/process_group.h"

namespace lockstep::distributed {

namespace mpi_detail {
class FingerprintChecks;  // Note [Fingerprints exchanged ahead over MPI]
}

class ProcessGroupMPI : public ProcessGroup {
 public:
  struct Options {
    bool check_every_collective = true;  // see Note [Collective fingerprints]; false: the first one only
  };

  // Initializes MPI on first use and makes a group of all processes
  // (MPI_COMM_WORLD's ranks). Collective: every rank must call it, in the same
  // order relative to other groups' collectives.
  static std::shared_ptr<ProcessGroupMPI> create(Options options);
  static std::shared_ptr<ProcessGroupMPI> create() { return create(Options{}); }
  // True when this process was started by mpirun (OMPI_COMM_WORLD_SIZE is set).
  static bool launched_by_mpirun();
  // Whether MPI's progress loop gives up the CPU while it waits for a peer: Open MPI's
  // mpi_yield_when_idle as MPI_T reports it (Note [The MPI thread yields while it waits],
  // process_group_mpi.cpp); empty where the MPI library has no such variable.
  // Initializes MPI on first use, like create().
  static std::optional<bool> yields_when_idle();
  ~ProcessGroupMPI() override;

  std::string backend_name() const override { return "mpi"; }

  std::shared_ptr<Work> allreduce(Tensor& tensor, ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> broadcast(Tensor& tensor, int root = 0) override;
  std::shared_ptr<Work> reduce(Tensor& tensor, int root, ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> allgather(std::vector<Tensor>& outputs, const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter(Tensor& output, std::vector<Tensor>& inputs,
                                       ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> barrier() override;
  std::shared_ptr<Work> send(const Tensor& tensor, int dst_rank, int tag = 0) override;
  std::shared_ptr<Work> recv(Tensor& tensor, int src_rank, int tag = 0) override;

  struct Comm;  // the MPI_Comms, kept out of this header (MPI is a private dependency)

 private:
  ProcessGroupMPI(std::unique_ptr<Comm> comm, int rank, int size, Options options);
  struct Pending;
  std::shared_ptr<Work> enqueue(Pending pending, bool collective = true);

  std::unique_ptr<Comm> comm_;
  Options options_;
  std::shared_ptr<mpi_detail::FingerprintChecks> checks_;
  std::mutex issue_mutex_;
  int64_t next_seq_ = 0;
  int64_t next_p2p_seq_ = 0;
};

}  // namespace lockstep::distributed
