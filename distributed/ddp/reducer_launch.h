// distributed/ddp/reducer_launch.h — how the Reducer reduces a full bucket: always
// through the communication-hook interface (distributed/ddp/comm_hook.h).
//
// § Note [Every launch through a comm hook]
// Reducer::launch builds the bucket's GradBucket and calls one CommHook; which
// one is decided here, once. Without a registered hook it is DDP's own: the
// bucket, already divided by the world size while its gradients were copied in
// (BucketStorage::copy_in), is AllReduced (SUM) — or, with
// DDPOptions().deterministic(true), all-gathered and summed in rank order
// (Note [Deterministic reduction] in deterministic_reduction.h). A hook
// registered with register_comm_hook replaces it and gets the plain local sums
// (Note [Communication hooks]): copy_scale() tells the Reducer which. So the
// core knows neither AllReduce nor deterministic mode, and a joined rank's
// shadow launch (reducer_join.cpp) is the same call on a zero bucket. A
// Reducer plug-in may replace DDP's AllReduce with a reduction of its own
// (Note [Reducer plug-ins], reducer_plugin.h).
// Read before: distributed/ddp/comm_hook.h, distributed/ddp/deterministic_reduction.h.
// Read next: distributed/ddp/reducer_launch.cpp, reducer_observers.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/error.h"
#include "distributed/ddp/comm_hook.h"
#include "distributed/ddp/ddp_options.h"
#include "distributed/process_group/process_group.h"

namespace lockstep::distributed {

// A registered hook failed or returned nothing: DDP cannot continue.
class CommHookError : public Error {
 public:
  using Error::Error;
};

class BucketLauncher {
 public:
  // `iteration`: the synced backward counter (names the timeline's spans).
  BucketLauncher(std::shared_ptr<ProcessGroup> process_group, const DDPOptions& options, const int64_t& iteration);

  // The user's hook (Note [Communication hooks]); `started`: a synced
  // iteration has begun, too late to change how buckets are scaled.
  void register_hook(CommHook hook, bool started);
  bool has_registered_hook() const { return registered_; }
  // A Reducer plug-in's `reduction` replaces DDP's AllReduce (not
  // deterministic mode's sum, not a registered hook); errors name it `what`
  // (nullptr: as the AllReduce). Note [Reducer plug-ins].
  void replace_allreduce(CommHook reduction, const char* what);
  // What a gradient is multiplied by when it is copied into its bucket: the
  // paper's 1/world (`divisor`) for DDP's own reduction, 1 for a registered hook.
  double copy_scale(double divisor) const { return registered_ ? 1.0 : 1.0 / divisor; }
  // Starts the bucket's reduction; a registered hook's failure is a CommHookError.
  TensorFuture launch(GradBucket& bucket) const;
  // "the AllReduce of bucket ", "the communication hook of bucket " or the plug-in's words, for errors.
  const char* what_reduces() const;

 private:
  std::shared_ptr<ProcessGroup> process_group_;
  const int64_t& iteration_;
  bool deterministic_;
  const char* what_ = "the AllReduce of bucket ";
  CommHook hook_;
  bool registered_ = false;
};

}  // namespace lockstep::distributed
