// distributed/process_group_gloo.h — ProcessGroup over Gloo's TCP transport.
//
// Construction is the rendezvous: every rank publishes its listening address in
// the Store and connects to every other rank (a full mesh of TCP pairs, Gloo's
// connectFullMesh). After that the store is only kept alive (rank 0 may host it,
// and slower ranks may still be reading from it). Collectives run on one
// worker thread (detail::WorkQueue) in issue order; the caller gets a Work at
// once. Gloo blocks that thread, never the caller's.
//
// Note [Collective order]
// Gloo matches messages by (peer, slot), and a slot is derived from a tag. We
// tag collective #k with k, and run them one at a time in issue order, so the
// k-th collective of every rank meets the k-th collective of every other rank.
// Tensors must stay alive and unmodified until the Work completes (the task
// holds a reference).
//
// Note [Allreduce algorithm choice]
// Gloo offers ring allreduce (reduce-scatter then allgather around a ring: 2(N-1)
// steps, each moving 1/N of the data — bandwidth-optimal) and BCube, which with
// base 2 is recursive halving-doubling (2·log2 N steps — latency-optimal, but
// with 2 ranks it posts whole-buffer sends that do not pipeline reduction with
// transfer). Below Options::ring_threshold_bytes (default 256 KiB, where one
// loopback/LAN round trip still dominates transfer time) we use BCube when N is
// a power of two, and ring otherwise. bench/bench_allreduce measures both sides.
//
// Failure: a peer that dies closes its sockets, and Gloo raises on the next
// send/recv; a peer that hangs is caught by the group's timeout() (Gloo's
// per-operation timeout). Either way the Work fails with an error naming the
// collective, and the group is broken: later collectives fail at once with the
// first error (Gloo's pairs cannot be resynchronized).
// Read before: distributed/process_group.h, distributed/work_queue.h,
// distributed/collective_check.h. Read next: distributed/process_group_mpi.h.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "distributed/process_group.h"
#include "distributed/store.h"

namespace gloo {
class Context;
}

namespace lockstep::distributed {

namespace detail {
class WorkQueue;
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
    bool check_every_collective = false;       // see Note [Collective fingerprints]
    int threads = 4;  // worker threads: collectives in flight at once (see Note [Collective order])
  };

  // Blocks until all `size` ranks have connected (or options.timeout passes).
  ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, Options options);
  ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size)
      : ProcessGroupGloo(std::move(store), rank, size, Options{}) {}
  ~ProcessGroupGloo() override;  // finishes queued collectives first

  std::string backend_name() const override { return "gloo"; }

  std::shared_ptr<Work> allreduce(Tensor& tensor, ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> broadcast(Tensor& tensor, int root = 0) override;
  std::shared_ptr<Work> allgather(std::vector<Tensor>& outputs, const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter(Tensor& output, std::vector<Tensor>& inputs,
                                       ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> barrier() override;
  std::shared_ptr<Work> send(const Tensor& tensor, int dst_rank, int tag = 0) override;
  std::shared_ptr<Work> recv(Tensor& tensor, int src_rank, int tag = 0) override;

  // The address this rank's Gloo device listens on ("127.0.0.1", "eth0", ...).
  const std::string& device_description() const { return device_description_; }

 private:
  struct Pending;  // one queued collective: fingerprint + the Gloo calls to make
  std::shared_ptr<Work> enqueue(Pending pending, bool collective = true);
  std::vector<Tensor> run(const Pending& pending);  // on the worker thread
  void exchange_fingerprints(const detail::Fingerprint& mine, std::chrono::milliseconds timeout);

  Options options_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<gloo::Context> context_;
  std::string device_description_;
  std::mutex issue_mutex_;      // callers: sequence numbers in issue order
  int64_t next_seq_ = 0;      // collectives
  int64_t next_p2p_seq_ = 0;  // send / recv
  std::mutex broken_mutex_;
  std::string broken_;  // worker threads: the first transport failure, if any
  std::unique_ptr<detail::WorkQueue> queue_;
};

}  // namespace lockstep::distributed
