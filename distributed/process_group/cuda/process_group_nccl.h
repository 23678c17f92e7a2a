// distributed/process_group/cuda/process_group_nccl.h — ProcessGroup over NCCL, for CUDA
// tensors (compiled only with the CUDA backend, Note [CUDA build]).
//
//   auto pg = ls::distributed::init_process_group("nccl");   // under lockstep-run
//   pg->allreduce(grad_on_gpu)->wait();   // the compute stream waits; the host does not
//
// Construction is the rendezvous: rank 0 calls ncclGetUniqueId and publishes
// the 128-byte id in the Store (one key per group made on that store); every rank reads it and calls ncclCommInitRank
// on the group's device (Options::device; init_process_group picks LOCAL_RANK
// modulo the number of devices). One group drives one device.
//
// § Note [NCCL stream isolation]
// Kernels run on the device's compute stream (core/cuda/cuda_context.h). NCCL
// runs on a dedicated communication stream of the group, so a collective never
// waits behind backward's kernels queued after it, and backward never waits
// behind a collective. Each collective
//   1. records an event on the current compute stream and makes the comm
//      stream wait on it (cudaStreamWaitEvent: the GPU orders the two streams,
//      the host does not wait) — the collective sees everything the compute
//      stream queued before the call, e.g. the gradients copied into a bucket;
//   2. runs the NCCL call on the comm stream and records an end event there;
//   3. calls ls::cuda::record_stream(tensor, comm stream) on every device
//      tensor it touches, so the caching allocator does not hand their blocks
//      to new tensors before the comm stream is done with them, and keeps the
//      tensors alive in the Work until the end event has completed.
// Work::wait() makes the current compute stream wait on the end event and
// returns at once: kernels queued after it (finalize_backward's copy out of the
// bucket, the optimizer) run after the collective, without a host round trip.
// WorkNCCL::synchronize() blocks the host instead (for code that reads results
// on the host). is_completed() turns true once the watchdog has seen the end
// event complete.
//
// § Note [NCCL host tensors]
// DDP's control collectives move small CPU tensors that the host fills and
// reads (the used-parameter bitmap, the iteration fingerprint, join flags,
// parameter shapes). Rather than making every caller copy them to the device
// and back, this group accepts CPU tensors too: they are staged through pinned
// host memory and a device scratch buffer (copied in and out on the comm
// stream), and wait() on a Work that has CPU tensors blocks the host until the
// results are back in the CPU tensors. barrier() is such a collective (one
// element), so it blocks the host, like Gloo's. Device tensors must be on the
// group's device and contiguous.
//
// § Note [NCCL watchdog]
// A thread per group polls, every Options::watchdog_interval, each pending
// Work's end event (cudaEventQuery) and the communicator's asynchronous error
// (ncclCommGetAsyncError). A completed event completes its Work (copying CPU
// results back, releasing the tensors). A Work older than timeout(), or an
// asynchronous NCCL error, aborts the communicator (ncclCommAbort, which also
// makes NCCL's kernels return so the streams can drain) and fails every pending
// Work with an ls::Error naming the collective, its sequence number, its size
// and the timeout. The group is then broken: later collectives throw at once
// with the first failure, as a broken Gloo group does. A compute stream that
// already waits on an aborted collective's event continues after the abort
// (with undefined data in its buffer); the error reaches the program at its
// next wait() or collective.
//
// § Note [NCCL collective checks]
// Every collective's fingerprint is compared across ranks before its NCCL call
// is enqueued (Note [Collective fingerprints]), as the Gloo and MPI groups do,
// so a mismatch is an ls::Error naming both ranks' calls on every rank, not a
// hang inside NCCL or a sum of wrong bytes. The fingerprints do not go through
// NCCL: an exchange on the comm stream would wait behind every collective
// queued there (and the host would wait for it), serializing DDP's buckets.
// They go through a small host group of the same ranks instead — a Gloo group
// made at construction over the same store (its keys under "nccl/checks/<k>/",
// shared memory when every rank is on this host, TCP otherwise; MASTER_ADDR and
// LOCKSTEP_SOCKET_IFNAME pick the interface as for "gloo"), as PyTorch's
// TORCH_DISTRIBUTED_DEBUG=DETAIL wraps NCCL with a Gloo group. The issuing
// thread blocks for that one host allgather of 40 bytes per collective, never
// for the GPU (detail::check_across_ranks, tested on CPU). NCCL launches run
// on the caller's thread one at a time, so there is nothing to batch (Note
// [Batched fingerprints] helps queued backends only). LOCKSTEP_COLLECTIVE_CHECKS=0
// or Options::check_every_collective = false checks the first collective only.
// send/recv pair by call order (NCCL has no tags: `tag` is accepted and
// ignored, as in PyTorch).
// Read before: distributed/process_group/process_group.h, core/cuda/cuda_context.h,
// distributed/process_group/process_group_gloo.h (the same interface over TCP).
// Read next: distributed/process_group/cuda/process_group_nccl_work.h, distributed/init.cpp.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "distributed/process_group/process_group.h"
#include "distributed/store/store.h"

namespace lockstep::distributed {

namespace detail {
struct Fingerprint;
struct NCCLComm;
class NCCLWatchdog;
class WorkNCCL;
}  // namespace detail

class ProcessGroupNCCL : public ProcessGroup {
 public:
  struct Options {
    std::chrono::milliseconds timeout{300000};  // per collective (watchdog), and for the id exchange
    int device = -1;                            // CUDA device index; -1: the current device
    bool check_every_collective = true;         // see Note [NCCL collective checks]
    std::chrono::milliseconds watchdog_interval{2};  // see Note [NCCL watchdog]
  };

  // Blocks until every rank has joined the communicator (ncclCommInitRank).
  ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size, Options options);
  ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size)
      : ProcessGroupNCCL(std::move(store), rank, size, Options{}) {}
  ~ProcessGroupNCCL() override;  // waits for pending collectives (bounded by the timeout), then destroys

  std::string backend_name() const override { return "nccl"; }

  std::shared_ptr<Work> allreduce(Tensor& tensor, ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> broadcast(Tensor& tensor, int root = 0) override;
  std::shared_ptr<Work> reduce(Tensor& tensor, int root, ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> allgather(std::vector<Tensor>& outputs, const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter(Tensor& output, std::vector<Tensor>& inputs,
                                       ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> barrier() override;
  std::shared_ptr<Work> send(const Tensor& tensor, int dst_rank, int tag = 0) override;
  std::shared_ptr<Work> recv(Tensor& tensor, int src_rank, int tag = 0) override;

  int device() const { return device_; }
  // The dedicated communication stream (Note [NCCL stream isolation]).
  cudaStream_t comm_stream() const { return comm_stream_; }
  // Empty while the group is usable, else the failure that broke it.
  std::string broken() const;

 private:
  // One collective's device-side plumbing; see process_group_nccl.cpp.
  struct Launch;
  // Numbers the collective, checks it (first / debug), then launch_locked.
  std::shared_ptr<Work> run(detail::Fingerprint fingerprint, bool collective, Launch launch,
                            const std::function<void(std::vector<Tensor>&)>& body, std::vector<Tensor> result);
  // Stage, order after the compute stream, call `body` (the NCCL calls), record; issue_mutex_ held.
  std::shared_ptr<Work> launch_locked(const std::string& description, Launch launch,
                                      const std::function<void(std::vector<Tensor>&)>& body,
                                      std::vector<Tensor> result);
  void check_usable(const std::string& what) const;

  Options options_;
  int device_ = 0;
  cudaStream_t comm_stream_ = nullptr;
  std::shared_ptr<detail::NCCLComm> comm_;
  std::shared_ptr<ProcessGroup> check_group_;  // Note [NCCL collective checks]; null in a group of one
  std::unique_ptr<detail::NCCLWatchdog> watchdog_;
  std::mutex issue_mutex_;    // sequence numbers and NCCL calls in issue order
  int64_t next_seq_ = 0;      // collectives
  int64_t next_p2p_seq_ = 0;  // send / recv
};

}  // namespace lockstep::distributed
