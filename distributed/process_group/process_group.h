// distributed/process_group/process_group.h — the collective-communication interface DDP uses.
//
// A ProcessGroup is `size()` ranks that issue the same collectives in the same
// order. Every collective is asynchronous: it returns a Work at once and runs
// on the group's own thread(s) (Gloo, MPI) or stream (NCCL), so the caller
// keeps computing; Work::wait() blocks until it is done (or throws its error).
// Tensors passed in must stay alive and unmodified until the Work completes
// (implementations keep a reference to them).
//
// Backends: ProcessGroupGloo (distributed/process_group/process_group_gloo.h), ProcessGroupMPI
// (process_group_mpi.h), ProcessGroupRoundRobin (process_group_round_robin.h),
// and the NCCL seam for the CUDA build. init_process_group() (../rendezvous.h)
// makes one from the environment.
// Read before: distributed/store/store.h. Read next: distributed/process_group/work.h,
// distributed/process_group/process_group_gloo.h.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "distributed/process_group/work.h"

namespace lockstep::distributed {

class Store;

enum class ReduceOp { SUM, AVG, MAX, MIN, PRODUCT };
const char* reduce_op_name(ReduceOp op);

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // c10d's spellings of the same (pg->getRank() in libtorch programs).
  int getRank() const { return rank_; }
  int getSize() const { return size_; }
  virtual std::string backend_name() const = 0;  // "gloo", "mpi", "nccl", "round_robin"

  // In place: every rank ends with op over all ranks' `tensor` (f32, f64, f16, bf16, i64).
  virtual std::shared_ptr<Work> allreduce(Tensor& tensor, ReduceOp op = ReduceOp::SUM) = 0;
  // c10d's spelling, `std::vector<Tensor> tmp = {grad}; pg->allreduce(tmp);`: one tensor
  // per process (as c10d's CPU backends require).
  std::shared_ptr<Work> allreduce(std::vector<Tensor>& tensors, ReduceOp op = ReduceOp::SUM) {
    LS_CHECK(tensors.size() == 1, backend_name(), " allreduce: expected one tensor in the list, got ",
             tensors.size(), "; reduce each tensor with its own call (or flatten them into one)");
    return allreduce(tensors[0], op);
  }
  // In place: every rank ends with root's `tensor`.
  virtual std::shared_ptr<Work> broadcast(Tensor& tensor, int root = 0) = 0;
  // In place on `root`: it ends with op over all ranks' `tensor`; the other
  // ranks' `tensor` is scratch afterwards (any value). ZeRO-2 reduces each
  // gradient to its owner with it (distributed/zero/zero_sharded_gradients.cpp). Gloo,
  // MPI and NCCL move the data once towards the root; a backend without a
  // native reduce gets this AllReduce, which gives the root the same sum.
  virtual std::shared_ptr<Work> reduce(Tensor& tensor, int root, ReduceOp op = ReduceOp::SUM) {
    return allreduce(tensor, op);
  }
  // outputs[r] receives rank r's `input` (outputs is resized to size() if empty).
  virtual std::shared_ptr<Work> allgather(std::vector<Tensor>& outputs, const Tensor& input) = 0;
  // output = op over ranks of inputs[rank()] (inputs has size() tensors shaped like output).
  virtual std::shared_ptr<Work> reduce_scatter(Tensor& output, std::vector<Tensor>& inputs,
                                               ReduceOp op = ReduceOp::SUM) = 0;
  virtual std::shared_ptr<Work> barrier() = 0;
  virtual std::shared_ptr<Work> send(const Tensor& tensor, int dst_rank, int tag = 0) = 0;
  virtual std::shared_ptr<Work> recv(Tensor& tensor, int src_rank, int tag = 0) = 0;

  // A zero-filled (numel) tensor for this group's collectives to move again and
  // again (DDP's buckets): where the backend can, in memory its peers read in
  // place (Gloo on one host: Note [Shared-memory buffers] in shm/shm_buffers.h); otherwise an
  // ordinary tensor. Any tensor works with every collective; this one may be faster.
  virtual Tensor empty_buffer(int64_t numel, ScalarType dtype, Device device);

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

  // The store this group was created from (every rank reaches it), or null if
  // none (MPI). Gloo groups set it at construction; init_process_group sets it
  // for a round-robin group. DDP keeps its progress board there by default
  // (Note [Progress board], distributed/ddp/ddp_progress.h).
  std::shared_ptr<Store> store() const { return store_; }
  void set_store(std::shared_ptr<Store> store) { store_ = std::move(store); }

 protected:
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_{300000};
  std::shared_ptr<Store> store_;
};

}  // namespace lockstep::distributed
