// distributed/ddp/reducer_readiness.h — when is a parameter's gradient ready? The
// Reducer's readiness policy, one per DDP, chosen from the options once.
//
// § Note [Readiness policies]
// The core Reducer (distributed/ddp/reducer.cpp) counts, per bucket, the gradients
// still pending and launches full buckets in index order. Which parameters it
// may count as ready, and when, is the policy's decision:
//   EveryParameterReadiness  (the default) every parameter gets exactly one
//       gradient per backward; its hook makes it ready. Nothing else happens.
//   UnusedParameterReadiness (find_unused_parameters, paper Section 3.2.3)
//       after forward, walk the graph from the outputs: the parameters it
//       cannot reach are ready at once (locally unused), and the bitmap of
//       locally used parameters (this iteration and the no_sync ones before)
//       is AllReduced while backward runs; finalize leaves the globally unused
//       parameters' .grad alone (reducer_readiness.cpp).
//   StaticGraphReadiness     (static_graph) counting instead of traversal, the
//       bitmap once; a gradient may become ready several times per backward
//       (Note [Static graph], reducer_static_graph.cpp).
// The policy also answers three questions others ask: whether a synced
// forward issues a collective (DDPCore's fingerprint decision, Note [DDP
// iteration fingerprint]), which collectives a joined rank must mirror
// (reducer_join.cpp), and what DETAIL logging reports as unused (ddp_debug.h).
// This is the one place where the modes are told apart
// (make_readiness_policy).
// Read before: distributed/ddp/reducer.h. Read next: distributed/ddp/reducer_readiness.cpp,
// distributed/ddp/reducer_static_graph.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "distributed/ddp/ddp_options.h"
#include "distributed/process_group/process_group.h"

namespace lockstep::distributed {

// Waits for the used-parameter bitmap's AllReduce; the Reducer's version turns
// a failure into its error naming the bitmap (Reducer::wait_or_fail).
using BitmapWait = std::function<void(Work&)>;

// The used-parameter bitmap: local use (hooks, traversal) and its AllReduce.
class UsedBitmap {
 public:
  explicit UsedBitmap(size_t num_params);
  void mark(size_t index) { local_.data_ptr<int64_t>()[index] = 1; }
  // AllReduces a copy of the local bitmap (the original keeps accumulating);
  // `zeros`: a joined rank's empty contribution (reducer_join.cpp).
  void start(ProcessGroup& process_group, bool zeros = false);
  bool in_flight() const { return work_ != nullptr; }
  // The bitmap summed over the ranks (empty when none was started).
  std::vector<int64_t> wait(const BitmapWait& wait);
  void clear();
  std::vector<int64_t> local() const { return local_.to_vector<int64_t>(); }
  int64_t allreduces() const { return allreduces_; }

 private:
  Tensor local_;   // (num params) int64, 0/1
  Tensor global_;  // (num params) int64, the copy in flight
  std::shared_ptr<Work> work_;
  int64_t allreduces_ = 0;
};

class ReadinessPolicy {
 public:
  virtual ~ReadinessPolicy() = default;

  // prepare_for_backward(outputs): the parameters that are ready at once
  // (locally unused), in index order.
  virtual std::vector<size_t> prepare(const std::vector<Tensor>& outputs) = 0;
  // Every hook, armed or not (no_sync iterations too).
  virtual void record_use(size_t index) { (void)index; }
  // An armed hook: is the gradient final for this backward? May throw ls::Error.
  virtual bool ready_on_hook(size_t index) { (void)index; return true; }
  // Start of finalize_backward: parameters to mark ready now, with whether
  // each is locally unused (static graph's counting backward).
  struct Late {
    size_t index;
    bool locally_unused;
  };
  virtual std::vector<Late> at_finalize() { return {}; }
  // After the launches: per parameter, how many ranks used it (empty: all
  // used; finalize copies out everything).
  virtual std::vector<int64_t> globally_used(const BitmapWait& wait) { (void)wait; return {}; }
  virtual void backward_finished() {}

  // Whether prepare() issues a collective (DDPCore exchanges the fingerprint first).
  virtual bool forward_issues_collective() const { return false; }
  // Whether DETAIL logging reports unused parameters, and the local bitmap it reports.
  virtual bool tracks_unused() const { return false; }
  virtual std::vector<int64_t> locally_used() const { return {}; }
  // A joined rank mirrors this policy's collectives with zeros (reducer_join.cpp):
  // before the backward fingerprint, after it, and the waits.
  virtual void shadow_before_fingerprint() {}
  virtual void shadow_after_fingerprint() {}
  virtual void shadow_wait(const BitmapWait& wait) { (void)wait; }

  // Test hooks: used-parameter bitmap AllReduces issued; whether static graph's
  // counting backward has happened.
  virtual int64_t bitmap_allreduces() const { return 0; }
  virtual bool counted() const { return false; }
  // Appended to the unfinished-reduction error.
  virtual std::string unfinished_hint() const { return ""; }
};

// The policy DDPOptions ask for (Note [Readiness policies]); it issues its
// collectives on `process_group` (which outlives it) and names parameters by
// `names` in errors.
std::unique_ptr<ReadinessPolicy> make_readiness_policy(const DDPOptions& options, const std::vector<Tensor>& params,
                                                       std::vector<std::string> names, ProcessGroup& process_group);
// Note [Static graph] (reducer_static_graph.cpp).
std::unique_ptr<ReadinessPolicy> make_static_graph_readiness(std::vector<std::string> names,
                                                             ProcessGroup& process_group);

}  // namespace lockstep::distributed
