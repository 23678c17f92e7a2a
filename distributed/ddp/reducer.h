// distributed/ddp/reducer.h — the per-iteration state machine of DDP's backward:
// the paper's algorithm (Section 3.2), with seams for everything added since.
//
// The core, in the order it runs (distributed/ddp/reducer.cpp; PyTorch's names):
//   prepare_for_backward(outputs)  after a synced forward (one outside no_sync();
//       DDPCore::post_forward calls it, distributed_data_parallel.cpp): reset the pending
//       counts; the readiness policy names the parameters that will get no
//       gradient here, and they are marked ready now.
//   autograd_hook(i)  parameter i's post-accumulate-grad hook: its .grad holds
//       its local value. The first one of a backward queues finalize_backward.
//   mark_variable_ready(i)  copy_grad_into_bucket: grad / world into the
//       parameter's slice of its bucket (the paper's averaging, before a SUM);
//       when the bucket's pending count reaches zero, launch_ready_buckets.
//   launch_ready_buckets()  (PyTorch's mark_bucket_ready) launch every full
//       bucket from the next unlaunched one, strictly in index order
//       (Note [Bucket launch order]), each through the comm-hook interface.
//   finalize_backward()  after the last node of backward: wait for every
//       bucket in index order and finalize_bucket: copy the averages back into
//       .grad, leaving globally unused parameters' .grad untouched.
// The seams, each in its own file beside its note:
//   ReadinessPolicy     which gradients are ready when: every parameter once
//                       (default), graph traversal + used-parameter bitmap
//                       (find_unused_parameters), counting (static_graph) —
//                       Note [Readiness policies], reducer_readiness.h,
//                       Note [Static graph], reducer_static_graph.cpp.
//   BucketStorage       the buckets; copy in / copy out, or gradients as views
//                       (Note [Gradients as bucket views], reducer_buckets.cpp).
//   BucketLauncher      DDP's AllReduce, deterministic reduction or the user's
//                       hook (Note [Every launch through a comm hook],
//                       reducer_launch.h).
//   IterationObservers  fingerprint, progress board, timeline, debug logging
//                       (Note [Iteration observers], reducer_observers.h).
//   ReducerPlugin       none by default; one attached after construction
//                       changes how buckets are filled, reduced and finalized
//                       (Note [Reducer plug-ins], reducer_plugin.h; ZeRO's
//                       plug-ins live in distributed/zero/).
// Outside the iteration: the bucket rebuild from the traced order
// (reducer_rebuild.cpp) and a joined rank's shadow collectives (reducer_join.cpp,
// distributed/ddp/ddp_join.h).
//
// § Note [Bucket launch order]
// Every rank must issue the same collectives in the same order, or AllReduces
// pair up buffers of different buckets (wrong results or a hang). Gradients can
// become ready in different orders on different ranks, so a bucket that fills
// early is not launched until all buckets before it have been: launches follow
// bucket index, which is the same on every rank (paper Section 3.2.3).
//
// Read before: distributed/ddp/bucket.h, distributed/ddp/comm_hook.h,
// autograd/accumulate_grad.h. Read next: distributed/ddp/reducer.cpp.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/accumulate_grad.h"
#include "distributed/ddp/bucket.h"
#include "distributed/ddp/comm_hook.h"
#include "distributed/ddp/ddp_options.h"
#include "distributed/ddp/nonfinite_check.h"
#include "distributed/process_group/process_group.h"
#include "distributed/ddp/reducer_buckets.h"
#include "distributed/ddp/reducer_launch.h"
#include "distributed/ddp/reducer_observers.h"
#include "distributed/ddp/reducer_plugin.h"
#include "distributed/ddp/reducer_readiness.h"

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
  // fingerprints are compared first (Note [DDP iteration fingerprint] in ddp_fingerprint.h).
  void begin_synced_forward(bool exchange_fingerprint);
  // Whether prepare_for_backward issues a collective (the bitmap of
  // find_unused_parameters), so that the forward exchanges the fingerprint first.
  bool forward_issues_collective() const { return readiness_->forward_issues_collective(); }
  // Arms the reducer for the backward of a synced forward whose results are `outputs`.
  void prepare_for_backward(const std::vector<Tensor>& outputs);
  // Throws if the previous synced iteration's reduction did not finish, naming
  // the parameters that got no gradient, or if an earlier fingerprint mismatch
  // or communication failure left DDP unusable (called at the start of each forward).
  void check_previous_reduction_finished();

  // Note [Bucket rebuild from the traced order] (reducer_rebuild.cpp).
  // True once a synced backward has recorded the ready order and the buckets
  // have not been rebuilt yet (and rebuild_buckets is on).
  bool should_rebuild_buckets() const;
  // Collective: broadcasts `source_rank`'s traced order and rebuilds the
  // buckets in it. Called by DDP in a synced forward, after the fingerprint.
  void rebuild_buckets(int source_rank);
  bool has_rebuilt_buckets() const { return rebuilt_; }

  // Note [Communication hooks] (comm_hook.h). Once, before the first synced backward.
  void register_comm_hook(CommHook hook);
  bool has_comm_hook() const { return launcher_.has_registered_hook(); }

  // Note [Reducer plug-ins] (reducer_plugin.h, reducer_plugin.cpp): once; the
  // plug-in may refuse the combination or the moment (ls::Error).
  void attach_plugin(std::unique_ptr<ReducerPlugin> plugin);
  bool has_plugin() const { return plugin_ != nullptr; }

  // What the SUM of the ranks' gradients is divided by (the world size; fewer
  // under join() with divide_by_initial_world_size(false)).
  void set_divisor(double divisor) { divisor_ = divisor; }
  double divisor() const { return divisor_; }

  // For a rank that has joined (reducer_join.cpp, distributed/ddp/ddp_join.h):
  // mirror the collectives of the other ranks' synced forward and backward,
  // contributing nothing, so that their collectives find a partner.
  void shadow_synced_forward(bool exchange_fingerprint);
  void shadow_backward();

  // Note [Static graph] (reducer_static_graph.cpp): how many used-parameter
  // bitmap AllReduces this Reducer has issued (a test hook), and whether the
  // first synced backward has recorded how often each gradient becomes ready.
  int64_t bitmap_allreduces() const { return readiness_->bitmap_allreduces(); }
  bool static_graph_recorded() const { return readiness_->counted(); }
  // Note [Gradient sinks]: how many gradients went straight into their slots (a test hook).
  int64_t gradients_placed() const { return storage_.gradients_placed(); }

  const std::vector<Bucket>& buckets() const { return storage_.buckets(); }
  size_t num_buckets() const { return storage_.buckets().size(); }
  // The progress board's note on which rank is behind, for a collective that
  // failed between a finished backward and the next one (Note [Progress board]).
  std::string where_others_are_after_backward() const { return observe_.where_others_are(num_buckets(), true); }
  const std::vector<Tensor>& parameters() const { return params_; }
  ProcessGroup& process_group() const { return *process_group_; }

 private:
  // reducer.cpp: the core, in paper order.
  void autograd_hook(size_t index);
  Tensor place_gradient(size_t index, const Tensor& incoming);  // the sink (reducer_grad_handover.cpp)
  void begin_backward();  // the first gradient of a synced backward
  void mark_variable_ready(size_t index, bool locally_unused = false);
  void copy_grad_into_bucket(size_t index, bool locally_unused);
  void launch_ready_buckets();
  // The bucket's reduction on `flat`: its buffer, or zeros of its size when shadowing.
  TensorFuture launch(size_t bucket_index, Tensor flat);
  void finalize_backward();
  // Finalizes the launched buckets from the next unfinalized one up to `end`, in index order.
  void finalize_buckets(size_t end, const std::vector<int64_t>& global_used);
  void finalize_bucket(size_t bucket_index, const std::vector<int64_t>& global_used);
  // Waits for the bucket's reduction and returns its averaged flat buffer.
  Tensor wait_for_bucket(size_t bucket_index);
  // Builds the buckets of `specs` (a plug-in arranges them first); `why` for the log.
  void build_buckets(std::vector<BucketSpec> specs, const char* why);
  // A synced forward or backward has happened.
  bool started() const { return observe_.backwards() > 0 || expect_autograd_hooks_; }
  // A failed wait (a dead or hung peer, a failing hook) names the backward and
  // the bucket (bucket_index == num_buckets(): the used-parameter bitmap).
  void wait_or_fail(const std::function<void()>& wait, size_t bucket_index);
  BitmapWait bitmap_wait();
  // Stops DDP: every later forward refuses with `message`.
  [[noreturn]] void fail(const std::string& message);
  template <class Fn>
  void or_fail(Fn&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      fail(e.what());
    }
  }

  // reducer_rebuild.cpp
  void record_ready_order(size_t index);
  void finish_ready_order();

  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::shared_ptr<ProcessGroup> process_group_;
  DDPOptions options_;
  BucketStorage storage_;
  IterationObservers observe_;
  detail::NonFiniteCheck non_finite_;  // Note [Non-finite gradients] in nonfinite_check.h
  BucketLauncher launcher_;
  std::unique_ptr<ReadinessPolicy> readiness_;
  std::vector<autograd::HookHandle> hooks_;
  std::vector<size_t> sinks_;  // the parameters whose gradient sink is this Reducer's
  std::unique_ptr<ReducerPlugin> plugin_;  // Note [Reducer plug-ins]; null by default
  friend class ReducerPlugin;
  double divisor_;

  // Per-iteration state.
  bool expect_autograd_hooks_ = false;    // a synced backward is expected
  bool finalize_queued_ = false;
  std::vector<bool> ready_;               // per parameter: marked ready this iteration
  size_t next_bucket_ = 0;                // next bucket to launch (in index order)
  size_t next_finalize_ = 0;              // next bucket to finalize (a plug-in may start during backward)
  bool unfinished_reduction_ = false;     // set by finalize if some buckets never filled
  std::vector<size_t> unfinished_params_;
  std::string failure_;  // set once a mismatch or a failed collective has stopped DDP

  // Note [Bucket rebuild from the traced order].
  std::vector<size_t> ready_order_;       // parameters in the order they became ready
  bool order_traced_ = false;             // a synced backward completed the trace
  bool rebuilt_ = false;
};

}  // namespace lockstep::distributed
