// distributed/ddp/reducer_plugin.h — the Reducer's one extension point: a plug-in,
// attached once (Reducer::attach_plugin, right after DDP is built), that the
// Reducer calls at fixed moments of the iteration. Without one (the default)
// the Reducer is the paper's (Section 3.2), and none of these calls happens.
//
// § Note [Reducer plug-ins]
// The paper's Reducer copies each ready gradient into its bucket, launches the
// full buckets in index order, and after backward waits for each one in index
// order and copies its averages out (reducer.cpp). A plug-in may change each
// of these steps, at one call each:
//   arrange(specs)            the order of the parameters within each bucket,
//                             whenever the buckets are (re)built;
//   reduction()               the collective that replaces DDP's own AllReduce
//                             (a registered comm hook or deterministic mode
//                             still replaces it in turn, unless the plug-in
//                             refuses them: check_comm_hook, attached);
//   copy_in(i, ...)           the copy of gradient i into its bucket;
//   bucket_launched(b)        after bucket b was launched, during backward; it
//                             may finalize earlier buckets (finalize_now);
//   finalize_bucket(b, used)  the wait for bucket b and its copy-out.
// The Reducer's parts a plug-in may use are the protected members below (the
// plug-in base is the Reducer's friend; nothing else is). The plug-ins: the
// bucket hand-over (distributed/zero/bucket_handover.h: a hook after each
// reduced bucket, which ZeRO's overlap steps from) and ZeRO-2's sharded
// gradients (distributed/zero/zero_sharded_gradients.h), which extends it.
// Read before: distributed/ddp/reducer.cpp. Read next: distributed/zero/bucket_handover.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"
#include "distributed/ddp/bucket_assignment.h"
#include "distributed/ddp/comm_hook.h"
#include "distributed/ddp/ddp_options.h"
#include "distributed/ddp/reducer_buckets.h"

namespace lockstep::distributed {

class Reducer;

class ReducerPlugin {
 public:
  virtual ~ReducerPlugin() = default;

  // Reducer::attach_plugin has set reducer(): check the combination (throw ls::Error to refuse).
  virtual void attached() {}
  // Reorders the parameters within each bucket spec; true if it may have
  // changed anything (the current buckets are then rebuilt at attach).
  virtual bool arrange(std::vector<BucketSpec>& specs) const { (void)specs; return false; }
  // The reduction that replaces DDP's AllReduce (empty: keep it), and how
  // errors name it ("the AllReduce of bucket " when nullptr).
  virtual CommHook reduction() { return nullptr; }
  virtual const char* what_reduces() const { return nullptr; }
  // register_comm_hook asks first: throw to refuse a comm hook.
  virtual void check_comm_hook() const {}
  // Gradient `index` times `scale` into its bucket (the default: BucketStorage::copy_in).
  virtual void copy_in(size_t index, bool locally_unused, double scale);
  // Bucket `bucket` was launched, during backward.
  virtual void bucket_launched(size_t bucket) { (void)bucket; }
  // Waits for launched bucket `bucket` and copies it out (global_used: as
  // BucketStorage::copy_out's). The default: the paper's, Reducer::wait_for_bucket + copy_out.
  virtual void finalize_bucket(size_t bucket, const std::vector<int64_t>& global_used);
  // Whether .grad may already have been consumed (an optimizer stepped on it)
  // by the end of backward: then the non-finite check is skipped.
  virtual bool consumes_gradients() const { return false; }

  void set_reducer(Reducer& reducer) { reducer_ = &reducer; }

 protected:
  // The Reducer's parts a plug-in uses (reducer_plugin.cpp).
  const Reducer& reducer() const { return *reducer_; }
  BucketStorage& storage();
  const std::vector<Tensor>& parameters() const;
  const DDPOptions& options() const;
  int rank() const;
  // A synced iteration has started (too late to change how buckets are reduced).
  bool started() const;
  // Synced backwards so far (names the timeline's spans: reducer_timeline.h).
  const int64_t& backwards() const;
  // Reducer::wait_for_bucket: waits for the bucket's future; a failure stops
  // DDP naming the backward and the bucket.
  Tensor wait_for_bucket(size_t bucket);
  // Runs `wait`; a failure stops DDP naming the backward and the bucket.
  void wait_or_fail(const std::function<void()>& wait, size_t bucket);
  // Runs `fn`; an ls::Error stops DDP (every later forward refuses).
  void or_fail(const std::function<void()>& fn);
  // Finalizes the launched buckets before `end` not finalized yet, in index
  // order, now; nothing when the copy-out needs the used-parameter bitmap,
  // known only at the end of backward (find_unused_parameters, static_graph).
  void finalize_now(size_t end);

 private:
  Reducer* reducer_ = nullptr;
};

}  // namespace lockstep::distributed
