// distributed/zero/zero_sharded_gradients.h — ZeRO stage 2 as a Reducer plug-in
// (Note [Reducer plug-ins]): the bucket hand-over that ZeRO's overlap steps
// from (distributed/zero/bucket_handover.h), plus gradients reduced only to the
// rank that steps them, and buckets that live only during backward
// (Note [ZeRO-2 buckets], zero_sharded_gradients.cpp). Attached by
// hook_with_zero_step (zero_overlap.h) for ZeroOptions().shard_gradients(true).
// Read before: distributed/zero/bucket_handover.h, distributed/zero/zero_overlap.h.
// Read next: distributed/zero/zero_sharded_gradients.cpp.
#pragma once

#include <vector>

#include "distributed/zero/bucket_handover.h"

namespace lockstep::distributed {

class ShardedGradients final : public BucketHandover {
 public:
  // owner[i]: the rank that steps DDP parameter i (kEveryRank: a split
  // parameter, its gradient AllReduced and kept by every rank).
  ShardedGradients(BucketReducedHook hook, int64_t piece_bytes, std::vector<int> owner);

  // Refused after the first synced forward, with gradient_as_bucket_view,
  // deterministic mode or a comm hook.
  void attached() override;
  bool arrange(std::vector<BucketSpec>& specs) const override;  // grouped by owner
  CommHook reduction() override;  // each owner's segment reduced to it
  const char* what_reduces() const override { return "the reduce to the owners (ZeRO-2) of bucket "; }
  void check_comm_hook() const override;
  void copy_in(size_t index, bool locally_unused, double scale) override;

 protected:
  bool kept(size_t index) const override;
  void release(size_t bucket) override;

 private:
  std::vector<int> owner_;
};

}  // namespace lockstep::distributed
