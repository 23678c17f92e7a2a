// distributed/reducer.h — the per-iteration state machine of DDP's backward.
//
// Vocabulary as PyTorch's reducer.cpp, so the two can be read side by side:
//   begin_synced_forward(exchange)  from DDP's pre-forward: count the forward
//       and, when that forward issues collectives, check the fingerprint first.
//   prepare_for_backward(outputs)  after a synced forward: reset pending counts;
//       with find_unused_parameters, walk the graph from the outputs and mark
//       every parameter it cannot reach as ready now, and start the AllReduce of
//       the used-parameter bitmap.
//   autograd_hook(i)  parameter i's post-accumulate-grad hook: its .grad is final.
//   mark_variable_ready(i)  copy grad / world into the bucket (with
//       gradient_as_bucket_view: scale it where it is); the first one in a
//       backward queues finalize_backward and starts the iteration fingerprint
//       exchange (Note [DDP iteration fingerprint], distributed/ddp_fingerprint.h);
//       when the bucket's pending count hits zero, mark_bucket_ready.
//   mark_bucket_ready(b)  launch every ready bucket from the next unlaunched one,
//       strictly in index order (Note [Bucket launch order]): an AllReduce, or
//       the communication hook (Note [Communication hooks], comm_hook.h);
//       before bucket 0, wait for the fingerprint and stop with an error if the
//       ranks disagree.
//   finalize_backward()  queued as an autograd callback by the first hook: wait
//       for every bucket, copy averages back into .grad (or point .grad at the
//       bucket), leave globally unused parameters' grads untouched.
// With DDPOptions().static_graph(true) the traversal and the bitmap happen in
// the first synced backward only, and a gradient may become ready several
// times per backward (activation checkpointing): Note [Static graph] in
// reducer.cpp. With deterministic(true), launch() sums in rank order instead
// of AllReducing (Note [Deterministic reduction], comm_hooks/deterministic_hook.h).
// Bucket construction, gradient views and the rebuild from the traced order
// live in reducer_buckets.cpp; what a rank that has joined does instead of
// training (join(), distributed/ddp_join.h) in reducer_join.cpp. With
// DDPOptions().progress_store, every failed wait also names the ranks that did
// not arrive (Note [Progress board], distributed/ddp_progress.h).
//
// Note [Bucket launch order]
// Every rank must issue the same collectives in the same order, or AllReduces
// pair up buffers of different buckets (wrong results or a hang). Gradients can
// become ready in different orders on different ranks, so a bucket that fills
// early is not launched until all buckets before it have been: launches follow
// bucket index, which is the same on every rank (paper Section 3.2.3).
//
// Read before: distributed/bucket.h, distributed/comm_hook.h,
// autograd/accumulate_grad.h. Read next: distributed/reducer.cpp,
// distributed/reducer_buckets.cpp, distributed/distributed_data_parallel.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/accumulate_grad.h"
#include "distributed/bucket.h"
#include "distributed/bucket_assignment.h"
#include "distributed/comm_hook.h"
#include "distributed/ddp_debug.h"
#include "distributed/ddp_fingerprint.h"
#include "distributed/ddp_options.h"
#include "distributed/ddp_progress.h"
#include "distributed/process_group.h"

namespace lockstep::distributed {

class Reducer {
 public:
  Reducer(std::vector<Tensor> params, std::vector<std::string> names,
          std::shared_ptr<ProcessGroup> process_group, const DDPOptions& options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // A synced forward is starting (it will arm the reducer or broadcast buffers).
  // When it issues collectives of its own (`exchange_fingerprint`), the ranks'
  // fingerprints are compared first (Note [DDP iteration fingerprint]).
  void begin_synced_forward(bool exchange_fingerprint);
  // Arms the reducer for the backward of a synced forward whose results are `outputs`.
  void prepare_for_backward(const std::vector<Tensor>& outputs);
  // Throws if the previous synced iteration's reduction did not finish, naming
  // the parameters that got no gradient, or if an earlier fingerprint mismatch
  // or communication failure left DDP unusable (called at the start of each forward).
  void check_previous_reduction_finished();

  // Note [Bucket rebuild from the traced order] (reducer_buckets.cpp).
  // True once a synced backward has recorded the ready order and the buckets
  // have not been rebuilt yet (and rebuild_buckets is on).
  bool should_rebuild_buckets() const;
  // Collective: broadcasts `source_rank`'s traced order and rebuilds the
  // buckets in it. Called by DDP in a synced forward, after the fingerprint.
  void rebuild_buckets(int source_rank);
  bool has_rebuilt_buckets() const { return rebuilt_; }

  // Note [Communication hooks] (comm_hook.h). Once, before the first synced backward.
  void register_comm_hook(CommHook hook);
  bool has_comm_hook() const { return comm_hook_ != nullptr; }

  // What the SUM of the ranks' gradients is divided by (the world size; fewer
  // under join() with divide_by_initial_world_size(false)).
  void set_divisor(double divisor) { divisor_ = divisor; }
  double divisor() const { return divisor_; }

  // For a rank that has joined (reducer_join.cpp, distributed/ddp_join.h):
  // mirror the collectives of the other ranks' synced forward and backward,
  // contributing nothing, so that their collectives find a partner.
  void shadow_synced_forward(bool exchange_fingerprint);
  void shadow_backward();

  // Note [Static graph] (reducer.cpp): how many used-parameter bitmap
  // AllReduces this Reducer has issued (a test hook), and whether the first
  // synced backward has recorded how often each gradient becomes ready.
  int64_t bitmap_allreduces() const { return bitmap_allreduces_; }
  bool static_graph_recorded() const { return static_counted_; }

  const std::vector<Bucket>& buckets() const { return buckets_; }
  size_t num_buckets() const { return buckets_.size(); }
  const std::vector<Tensor>& parameters() const { return params_; }
  ProcessGroup& process_group() const { return *process_group_; }

 private:
  // reducer_buckets.cpp
  void initialize_buckets(const std::vector<BucketSpec>& specs);
  Tensor bucket_view(size_t index) const;  // parameter's slice, shaped like it
  bool is_bucket_view(size_t index, const Tensor& grad) const;
  void record_ready_order(size_t index);
  void finish_ready_order();

  // reducer.cpp
  void autograd_hook(size_t index);
  void begin_backward();  // the first gradient of a synced backward
  void static_graph_hook(size_t index);  // Note [Static graph]
  void finish_static_counting();
  void mark_variable_ready(size_t index, bool locally_unused = false);
  void copy_grad_into_bucket(size_t index, bool locally_unused);
  void mark_bucket_ready(size_t bucket_index);
  void launch_ready_buckets();
  TensorFuture launch(size_t bucket_index, Tensor flat);
  void finalize_backward();
  void finalize_bucket(size_t bucket_index, const std::vector<int64_t>& global_used);
  void wait_or_fail(const std::function<void()>& wait, size_t bucket_index);
  void start_fingerprint(detail::DDPPhase phase);  // Note [DDP iteration fingerprint]
  void finish_fingerprint();  // waits for the exchange; a mismatch becomes failure_
  [[noreturn]] void fail(const std::string& message);
  // This rank's position in the current synced backward (Note [Progress board]).
  detail::DDPPosition position(size_t launched, bool finished) const;
  void record_progress(size_t launched, bool finished);
  // " Progress board: ..." naming the ranks not yet at `waiting_at`, or ""
  // without a progress_store.
  std::string progress_note(const detail::DDPPosition& waiting_at) const;
  std::vector<size_t> unready_parameters() const;
  // Note [DDP debug levels] (ddp_debug.h): the bucket layout at INFO (rank 0) or
  // DETAIL (every rank); after a backward at DETAIL, the parameters without a gradient.
  void log_bucket_layout(const char* when) const;
  void log_unused_parameters(const std::vector<int64_t>& global_used) const;
  std::string names_of(const std::vector<size_t>& indices) const;

  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::shared_ptr<ProcessGroup> process_group_;
  DDPOptions options_;
  std::vector<autograd::HookHandle> hooks_;
  CommHook comm_hook_;
  detail::DDPDebugLevel debug_level_ = detail::DDPDebugLevel::OFF;  // LOCKSTEP_DISTRIBUTED_DEBUG
  double divisor_;

  std::vector<Bucket> buckets_;
  struct Location {
    size_t bucket;  // which bucket
    size_t slot;    // which parameter within it
  };
  std::vector<Location> locations_;  // per parameter

  // Per-iteration state.
  bool expect_autograd_hooks_ = false;    // a synced backward is expected
  bool finalize_queued_ = false;
  std::vector<bool> ready_;               // per parameter: marked ready this iteration
  size_t next_bucket_ = 0;                // next bucket to launch (in index order)
  bool unfinished_reduction_ = false;     // set by finalize if some buckets never filled
  std::vector<size_t> unfinished_params_;

  // Note [Bucket rebuild from the traced order].
  std::vector<size_t> ready_order_;       // parameters in the order their hooks fired
  bool order_traced_ = false;             // a synced backward completed the trace
  bool rebuilt_ = false;

  // Note [DDP iteration fingerprint]: counters and the exchange.
  int64_t synced_forwards_ = 0;
  int64_t synced_backwards_ = 0;
  int64_t layout_hash_ = 0;
  int64_t num_elements_ = 0;
  detail::IterationFingerprint fingerprint_;
  std::string failure_;  // set once a mismatch or a failed collective has stopped DDP
  std::unique_ptr<detail::ProgressBoard> progress_;  // with DDPOptions().progress_store

  // find_unused_parameters: parameters used locally since the last synced
  // backward (no_sync iterations accumulate), AllReduced as a bitmap.
  Tensor local_used_;                     // (num params) int64, 0/1
  Tensor global_used_;                    // the bitmap in flight, summed over ranks
  std::shared_ptr<Work> local_used_work_;
  int64_t bitmap_allreduces_ = 0;

  // Note [Static graph]: readies per parameter in this backward and in the
  // first synced one (expected from then on), the order of the last readies,
  // and the globally used parameters from the one bitmap AllReduce.
  std::vector<int> ready_count_;
  std::vector<int> expected_ready_;
  std::vector<uint64_t> last_ready_at_;
  uint64_t ready_clock_ = 0;
  bool static_counted_ = false;     // expected_ready_ is known
  bool static_used_known_ = false;  // static_global_used_ is known
  std::vector<int64_t> static_global_used_;
};

}  // namespace lockstep::distributed
