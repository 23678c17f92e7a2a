// distributed/process_group/process_group_gloo.h — ProcessGroup over Gloo's TCP transport.
//
// Construction is the rendezvous: every rank publishes its listening address in
// the Store and connects to every other rank (a full mesh of TCP pairs, Gloo's
// connectFullMesh). After that the store is only kept alive (rank 0 may host it,
// and slower ranks may still be reading from it). Collectives run on the
// group's worker threads (detail::WorkQueue), started in issue order; the
// caller gets a Work at once. Gloo blocks those threads, never the caller's.
//
// § Note [Collective order]
// Gloo matches messages by (peer, slot), and a slot is derived from a tag. We
// tag collective #k with k (its position in the issue order, the same on every
// rank), so the k-th collective of every rank meets the k-th collective of
// every other rank even when several run at once. Options::threads worker
// threads take collectives from the queue in issue order, so up to `threads`
// are in flight: one Gloo collective is a chain of small send/recv steps, each
// waiting on a thread wake-up on both ranks, and overlapping several chains is
// what brings back-to-back small calls well under one chain's latency
// (bench/bench_allreduce; the thread count measured best:
// docs/results/distributed_choices.md). Completion order may differ
// from issue order; DDP waits on every bucket's Work anyway. Tensors must stay
// alive and unmodified until the Work completes (the task holds a reference).
//
// § Note [Allreduce algorithm choice]
// Gloo offers ring allreduce (reduce-scatter then allgather around a ring: 2(N-1)
// steps, each moving 1/N of the data — bandwidth-optimal) and BCube, which with
// base 2 is recursive halving-doubling (2·log2 N steps — latency-optimal, but
// with 2 ranks it posts whole-buffer sends that do not pipeline reduction with
// transfer). Below Options::ring_threshold_bytes (default 256 KiB, where one
// loopback/LAN round trip still dominates transfer time) we use BCube when N is
// a power of two, and ring otherwise. bench/bench_allreduce measures both sides.
//
// § Note [Large allreduce in chunks]
// One Gloo ring allreduce alternates between moving a segment and reducing it,
// on one thread. With several worker threads, an allreduce above
// Options::chunk_bytes (4 MiB) is issued as consecutive allreduces of 4 MiB
// pieces (each its own tag), so the threads work on several pieces at once —
// the same split on every rank, since it depends only on the size. One Work
// covers all pieces (measured: docs/results/distributed_choices.md).
//
// § Note [Shared memory on one host]
// When every rank of the group runs on this host (checked at construction
// through the store: Note [Shared-memory rendezvous], shm/shm_rendezvous.cpp),
// allreduce, broadcast and allgather move their bytes through a shared-memory
// segment instead of TCP loopback (shm/shm_channel.h): memcpy speed instead of
// the kernel's socket copies, and each rank reduces its own share. They run on
// one more worker thread of their own, in issue order, with the same sequence
// numbers, fingerprints, timeouts and failure rule as the Gloo collectives
// (a dead or late peer fails the Work naming that rank and breaks the group).
// Every other collective, and every group spanning hosts, uses Gloo. If the
// segment cannot be set up (e.g. /dev/shm too small), every rank stays on Gloo
// and rank 0 prints one warning line. Options::shared_memory = false or
// LOCKSTEP_SHM=0 turns it off.
//
// Failure: a peer that dies closes its sockets, and Gloo raises on the next
// send/recv; a peer that hangs is caught by the group's timeout() (Gloo's
// per-operation timeout). Either way the Work fails with an error naming the
// collective, and the group is broken: later collectives fail at once with the
// first error (Gloo's pairs cannot be resynchronized). Before the failed call's
// buffers are freed, every pair is closed, so Gloo's loop thread can no longer
// touch them (Note [Gloo buffers after a failure], process_group_gloo_pending.h).
// Read before: distributed/process_group/process_group.h, distributed/process_group/work_queue.h,
// distributed/process_group/collective_check.h. Read next:
// distributed/process_group/process_group_mpi.h.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "distributed/process_group/process_group.h"
#include "distributed/store/store.h"

namespace gloo {
class Context;
}

namespace lockstep::distributed {

namespace gloo_detail {
class FingerprintChecks;
}

namespace detail {
class WorkQueue;
class ShmChannel;
struct Fingerprint;
}

class ProcessGroupGloo : public ProcessGroup {
 public:
  struct Options {
    std::chrono::milliseconds timeout{300000};  // per collective, and for the rendezvous
    // Where this rank listens. iface (e.g. "eth0") wins; else hostname (an address
    // of this host); else the local address that routes to master_addr.
    // LOCKSTEP_SOCKET_IFNAME fills iface when both are empty.
    std::string iface;
    std::string hostname;
    std::string master_addr = "127.0.0.1";
    size_t ring_threshold_bytes = 256 * 1024;  // see Note [Allreduce algorithm choice]
    // Fingerprint every collective (Note [Collective fingerprints]); false checks
    // the first one only. LOCKSTEP_COLLECTIVE_CHECKS=0 turns it off, and
    // LOCKSTEP_DISTRIBUTED_DEBUG on.
    bool check_every_collective = true;
    // Worker threads = collectives in flight at once (see Note [Collective order]).
    int threads = 4;
    size_t chunk_bytes = 4 << 20;  // see Note [Large allreduce in chunks]
    // Ranks on one host meet in shared memory (Note [Shared memory on one host]);
    // one slot (a rank's chunk of a step) is shm_slot_bytes, a multiple of 64.
    bool shared_memory = true;
    size_t shm_slot_bytes = 1 << 20;
    // empty_buffer hands out memory the peers read in place, so an allreduce
    // on it skips the slots (Note [Shared-memory buffers]).
    bool shm_buffers = true;
    // LOCKSTEP_GLOO_THREADS, LOCKSTEP_GLOO_CHUNK_BYTES and LOCKSTEP_GLOO_RING_THRESHOLD
    // (bytes) override threads, chunk_bytes and ring_threshold_bytes (for benchmarks);
    // LOCKSTEP_SHM=0 turns shared_memory off, LOCKSTEP_SHM_SLOT_BYTES sets shm_slot_bytes,
    // LOCKSTEP_SHM_BUFFERS=0 turns shm_buffers off.
  };

  // Blocks until all `size` ranks have connected (or options.timeout passes).
  ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, Options options);
  ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size)
      : ProcessGroupGloo(std::move(store), rank, size, Options{}) {}
  ~ProcessGroupGloo() override;  // finishes queued collectives first

  std::string backend_name() const override { return "gloo"; }

  std::shared_ptr<Work> allreduce(Tensor& tensor, ReduceOp op = ReduceOp::SUM) override;
  // On one host, CPU: memory the peers read in place (Note [Shared-memory buffers]).
  Tensor empty_buffer(int64_t numel, ScalarType dtype, Device device) override;
  std::shared_ptr<Work> broadcast(Tensor& tensor, int root = 0) override;
  std::shared_ptr<Work> reduce(Tensor& tensor, int root, ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> allgather(std::vector<Tensor>& outputs, const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter(Tensor& output, std::vector<Tensor>& inputs,
                                       ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> barrier() override;
  std::shared_ptr<Work> send(const Tensor& tensor, int dst_rank, int tag = 0) override;
  std::shared_ptr<Work> recv(Tensor& tensor, int src_rank, int tag = 0) override;

  // The address this rank's Gloo device listens on ("127.0.0.1", "eth0", ...).
  const std::string& device_description() const { return device_description_; }
  // The options it was made with (a second group over the same ranks reuses them:
  // Note [ZeRO broadcast group], distributed/zero/zero_broadcasts.cpp).
  const Options& options() const { return options_; }
  // True when allreduce, broadcast and allgather go through shared memory.
  bool uses_shared_memory() const { return shm_ != nullptr; }

 private:
  struct Pending;  // one queued collective: fingerprint + the Gloo calls to make
  std::shared_ptr<Work> enqueue(Pending pending, bool collective = true);
  std::shared_ptr<Work> enqueue(std::vector<Pending> parts, std::vector<Tensor> result);
  // At issue, under issue_mutex_; `checkable`: false for an allreduce's later pieces.
  void record_fingerprint(Pending& pending, bool checkable = true);
  void check_in_shared_memory_first(Pending& pending);  // at issue, with shm_
  // On the worker threads:
  std::vector<Tensor> run(const Pending& pending);  // check_before_running, then execute
  void check_before_running(const Pending& pending);  // the one check entry point
  std::vector<Tensor> execute(const Pending& pending);
  void connect_shared_memory(int rank, int size);
  // On the shared-memory worker: runs `call` with the collective's fingerprint,
  // turning a ShmFailure into a transport failure (Note [Shared memory on one host]).
  void on_shm(uint32_t tag, detail::Fingerprint fingerprint,
              const std::function<void(const detail::Fingerprint&)>& call);
  void mark_broken(const std::string& failure);
  [[noreturn]] void fail(const Pending& pending, const std::string& what);

  Options options_;  // the store is the base class's store_ (ProcessGroup::store())
  std::shared_ptr<gloo::Context> context_;
  std::string device_description_;
  std::mutex issue_mutex_;      // callers: sequence numbers in issue order
  int64_t next_seq_ = 0;      // collectives
  int64_t next_p2p_seq_ = 0;  // send / recv
  std::mutex broken_mutex_;
  std::string broken_;  // worker threads: the first transport failure, if any
  std::unique_ptr<detail::WorkQueue> queue_;
  std::unique_ptr<detail::ShmChannel> shm_;             // null: every collective on Gloo
  std::unique_ptr<detail::WorkQueue> shm_queue_;        // its one worker thread
  // Note [Fingerprints exchanged in batches over Gloo]; null in a group of one.
  std::unique_ptr<gloo_detail::FingerprintChecks> fingerprints_;
  bool record_every_fingerprint_ = false;  // check_every_collective, over TCP (shared memory checks its own)
};

}  // namespace lockstep::distributed
