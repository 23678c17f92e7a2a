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
// shadow launch (reducer_join.cpp) is the same call on a zero bucket. Under
// ZeRO-2 DDP's own hook reduces each owner's segment to its owner instead
// (Note [ZeRO-2 buckets], reducer_buckets.cpp).
// Read before: distributed/ddp/comm_hook.h, distributed/ddp/deterministic_reduction.h.
// Read next: reducer_observers.h; on README's DDP track, distributed_data_parallel.h.
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
  // ZeRO-2 (Note [ZeRO-2 buckets], reducer_buckets.cpp): DDP's own reduction
  // becomes a reduce of each owner's segment to that owner (owner[i] for
  // DDP parameter i). Refused with a registered hook or deterministic mode.
  void reduce_to_owners(std::vector<int> owner);
  // DDP's own reduction (AllReduce or ZeRO-2's reduces; not a registered hook
  // or deterministic mode) goes in collectives of `bytes` each, so that a
  // bucket can be handed over piece by piece (Note [Handing a bucket over in
  // pieces], reducer_handover.cpp). 0 (the default): one collective a bucket (segment).
  void reduce_in_pieces(int64_t bytes);
  // What a gradient is multiplied by when it is copied into its bucket: the
  // paper's 1/world (`divisor`) for DDP's own reduction, 1 for a registered hook.
  double copy_scale(double divisor) const { return registered_ ? 1.0 : 1.0 / divisor; }
  // Starts the bucket's reduction; a registered hook's failure is a CommHookError.
  TensorFuture launch(GradBucket& bucket) const;
  // "the AllReduce of bucket " or "the communication hook of bucket ", for errors.
  const char* what_reduces() const;

 private:
  std::shared_ptr<ProcessGroup> process_group_;
  const int64_t& iteration_;
  bool deterministic_;
  bool to_owners_ = false;
  int64_t piece_bytes_ = 0;  // reduce_in_pieces
  CommHook hook_;
  bool registered_ = false;
};

}  // namespace lockstep::distributed
