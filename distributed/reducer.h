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
//   mark_variable_ready(i)  copy grad / world into the bucket; the first one in a
//       backward queues finalize_backward and starts the iteration fingerprint
//       exchange (Note [DDP iteration fingerprint], distributed/ddp_fingerprint.h);
//       when the bucket's pending count hits zero, mark_bucket_ready.
//   mark_bucket_ready(b)  launch every ready bucket from the next unlaunched one,
//       strictly in index order (Note [Bucket launch order]); before bucket 0,
//       wait for the fingerprint and stop with an error if the ranks disagree.
//   finalize_backward()  queued as an autograd callback by the first hook: wait
//       for every bucket, copy averages back into .grad, leave globally unused
//       parameters' grads untouched.
//
// Note [Bucket launch order]
// Every rank must issue the same collectives in the same order, or AllReduces
// pair up buffers of different buckets (wrong results or a hang). Gradients can
// become ready in different orders on different ranks, so a bucket that fills
// early is not launched until all buckets before it have been: launches follow
// bucket index, which is the same on every rank (paper Section 3.2.3).
//
// Read before: distributed/bucket.h, autograd/accumulate_grad.h. Read next:
// distributed/distributed_data_parallel.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/accumulate_grad.h"
#include "distributed/bucket.h"
#include "distributed/ddp_fingerprint.h"
#include "distributed/ddp_options.h"
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

  const std::vector<Bucket>& buckets() const { return buckets_; }
  size_t num_buckets() const { return buckets_.size(); }

 private:
  void autograd_hook(size_t index);
  void mark_variable_ready(size_t index);
  void mark_bucket_ready(size_t bucket_index);
  void launch_ready_buckets();
  void finalize_backward();
  void start_fingerprint(detail::DDPPhase phase);  // Note [DDP iteration fingerprint]
  void finish_fingerprint();  // waits for the exchange; a mismatch becomes failure_
  [[noreturn]] void fail(const std::string& message);
  std::vector<size_t> unready_parameters() const;
  std::string names_of(const std::vector<size_t>& indices) const;

  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::shared_ptr<ProcessGroup> process_group_;
  DDPOptions options_;
  std::vector<autograd::HookHandle> hooks_;

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

  // Note [DDP iteration fingerprint]: counters and the exchange.
  int64_t synced_forwards_ = 0;
  int64_t synced_backwards_ = 0;
  int64_t layout_hash_ = 0;
  int64_t num_elements_ = 0;
  detail::IterationFingerprint fingerprint_;
  std::string failure_;  // set once a mismatch or a failed collective has stopped DDP

  // find_unused_parameters: parameters used locally since the last synced
  // backward (no_sync iterations accumulate), AllReduced as a bitmap.
  Tensor local_used_;                     // (num params) int64, 0/1
  Tensor global_used_;                    // the bitmap in flight, summed over ranks
  std::shared_ptr<Work> local_used_work_;
};

}  // namespace lockstep::distributed
