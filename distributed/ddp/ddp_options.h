// distributed/ddp/ddp_options.h — DDPOptions: the knobs of DistributedDataParallel,
// with fluent setters (libtorch style) and PyTorch's names and defaults.
// Read before: distributed/process_group/process_group.h. Read next:
// distributed/ddp/bucket_assignment.h.
#pragma once

#include <cstdint>
#include <memory>

namespace lockstep::distributed {

class Store;
// What DDP does with NaN/Inf gradients: Note [Non-finite gradients] in distributed/ddp/nonfinite_check.h.
enum class NonFinitePolicy { OFF, WARN, SKIP_STEP, STOP };

class DDPOptions {
 public:
  // Bucket size limit in MB (2^20 bytes); 0 means one bucket per parameter (the
  // paper's 0 MB baseline). Default 25, like PyTorch.
  DDPOptions& bucket_cap_mb(double v) { bucket_cap_mb_ = v; return *this; }
  // Limit of the first bucket (the last parameters), small so that the first
  // AllReduce starts early in backward. Default 1 MB.
  DDPOptions& first_bucket_mb(double v) { first_bucket_mb_ = v; return *this; }
  // Walk the autograd graph after forward to find parameters that will get no
  // gradient, and AllReduce a bitmap of used parameters. Default false.
  DDPOptions& find_unused_parameters(bool v) { find_unused_parameters_ = v; return *this; }
  // Broadcast buffers (BatchNorm running stats) from rank 0 before each synced forward.
  DDPOptions& broadcast_buffers(bool v) { broadcast_buffers_ = v; return *this; }
  // false: launch no AllReduce until backward has finished (the paper's
  // no-overlap baseline, for benchmarks). Default true.
  DDPOptions& overlap(bool v) { overlap_ = v; return *this; }
  // Make each parameter's .grad a view into its bucket's flat buffer, so that
  // hooks copy nothing in and finalize copies nothing out, and one
  // gradient-sized buffer is saved (Note [Gradients as bucket views] in
  // distributed/ddp/reducer_buckets.cpp). Default false, like PyTorch.
  DDPOptions& gradient_as_bucket_view(bool v) { gradient_as_bucket_view_ = v; return *this; }
  // Rebuild the buckets once, before the second synced iteration, in the order
  // gradients became ready in the first (rank 0's order, broadcast). Default
  // true, like PyTorch (Note [Bucket rebuild from the traced order] in
  // distributed/ddp/reducer_rebuild.cpp).
  DDPOptions& rebuild_buckets(bool v) { rebuild_buckets_ = v; return *this; }
  // The progress board (Note [Progress board], distributed/ddp/ddp_progress.h):
  // each rank records its progress in a store every rank reaches, two small
  // writes per iteration from a background thread, so that when a collective
  // times out the error names the ranks that did not arrive and where they are.
  // On by default, on the process group's own store (ProcessGroup::store(); a
  // group without one, e.g. MPI, has no board). progress_store(store) uses
  // another store; progress_store(nullptr), progress_board(false) or the
  // environment variable LOCKSTEP_PROGRESS_BOARD=0 turns it off.
  DDPOptions& progress_store(std::shared_ptr<Store> store) {
    progress_store_ = std::move(store);
    progress_board_ = progress_store_ != nullptr;
    return *this;
  }
  DDPOptions& progress_board(bool v) { progress_board_ = v; return *this; }
  // The set of used parameters and the autograd graph are the same every
  // iteration (PyTorch's static_graph). The first synced backward counts how
  // many times each parameter's gradient becomes ready and AllReduces the
  // used-parameter bitmap once; later iterations reuse both: no graph traversal,
  // no bitmap collective, and a parameter may become ready several times in one
  // backward (activation checkpointing, autograd/checkpoint.h) — its bucket
  // waits for the last time (Note [Static graph] in distributed/ddp/reducer_static_graph.cpp).
  // Default false.
  DDPOptions& static_graph(bool v) { static_graph_ = v; return *this; }
  // Sum every gradient element in rank order 0..N-1 (AllGather + local sum), so
  // results are bitwise identical across bucket_cap_mb values, backends and
  // runs, at N/2 times the AllReduce traffic (Note [Deterministic reduction] in
  // distributed/ddp/deterministic_reduction.h). Default false.
  DDPOptions& deterministic(bool v) { deterministic_ = v; return *this; }
  // At construction, time AllReduce at a few sizes on the process group and
  // choose bucket_cap_mb and first_bucket_mb from the fitted latency and
  // bandwidth, replacing the values set here (Note [Bucket autotuning] in
  // distributed/ddp/bucket_autotune.h). Collective: every rank must set it alike.
  // Default false.
  DDPOptions& autotune_buckets(bool v) { autotune_buckets_ = v; return *this; }
  // Every k-th synced iteration, compare a hash of every parameter across ranks
  // and throw naming the ranks whose replicas differ and the first parameter
  // (Note [Replica divergence check] in distributed/ddp/replica_check.h). 0 turns
  // it off; LOCKSTEP_REPLICA_CHECK_EVERY overrides it. Default 50.
  DDPOptions& check_replicas_every(int64_t k) { check_replicas_every_ = k; return *this; }
  // What a synced backward does when the averaged gradients hold NaN or Inf:
  // WARN (default: a line naming the rank, parameter and iteration), SKIP_STEP
  // (also clears every .grad, so optimizer.step() changes nothing), STOP
  // (throws), OFF. LOCKSTEP_NONFINITE=off|warn|skip|stop overrides it (Note
  // [Non-finite gradients] in distributed/ddp/nonfinite_check.h).
  DDPOptions& non_finite_gradients(NonFinitePolicy p) { non_finite_gradients_ = p; return *this; }

  double bucket_cap_mb() const { return bucket_cap_mb_; }
  double first_bucket_mb() const { return first_bucket_mb_; }
  bool find_unused_parameters() const { return find_unused_parameters_; }
  bool broadcast_buffers() const { return broadcast_buffers_; }
  bool overlap() const { return overlap_; }
  bool gradient_as_bucket_view() const { return gradient_as_bucket_view_; }
  bool rebuild_buckets() const { return rebuild_buckets_; }
  const std::shared_ptr<Store>& progress_store() const { return progress_store_; }
  bool progress_board() const { return progress_board_; }
  bool static_graph() const { return static_graph_; }
  bool deterministic() const { return deterministic_; }
  bool autotune_buckets() const { return autotune_buckets_; }
  int64_t check_replicas_every() const { return check_replicas_every_; }
  NonFinitePolicy non_finite_gradients() const { return non_finite_gradients_; }

 private:
  double bucket_cap_mb_ = 25.0;
  double first_bucket_mb_ = 1.0;
  bool find_unused_parameters_ = false;
  bool broadcast_buffers_ = true;
  bool overlap_ = true;
  bool gradient_as_bucket_view_ = false;
  bool rebuild_buckets_ = true;
  std::shared_ptr<Store> progress_store_;
  bool progress_board_ = true;
  bool static_graph_ = false;
  bool deterministic_ = false;
  bool autotune_buckets_ = false;
  int64_t check_replicas_every_ = 50;
  NonFinitePolicy non_finite_gradients_ = NonFinitePolicy::WARN;
};

}  // namespace lockstep::distributed
