// distributed/zero/zero_sharded_gradients.cpp — ZeRO-2's Reducer plug-in: owner
// grouping, the reduce to the owners, and the buckets freed after backward.
//
// § Note [ZeRO-2 buckets]
// Under ZeRO stage 2 (ZeroOptions().shard_gradients(true), hook_with_zero_step)
// each parameter has an owner rank — the one whose optimizer shard steps it —
// and only the owner needs its averaged gradient. So:
//  - each bucket's parameters are grouped by owner, in rank order (a stable
//    sort of the assignment's order, the same on every rank), making every
//    owner's gradients one contiguous segment (arrange); each segment is
//    reduced to its owner (ProcessGroup::reduce) instead of AllReducing the
//    bucket (reduction);
//  - a gradient owned by every rank (kEveryRank: a parameter ZeRO splits,
//    every rank stepping a slice) is AllReduced as one segment, and kept;
//  - a gradient this rank does not own is dropped from .grad as soon as it
//    has been copied into its bucket (copy_in), and copy_out writes back only
//    the owned slices (kept): between iterations a rank holds 1/N of the
//    gradients;
//  - after finalize has handed a bucket to the optimizer, its buffer is freed
//    (release) and allocated again by the first copy_in of the next backward
//    (uninitialized: every slot is written before the bucket is launched).
// The owner's segment is the SUM of the same scaled gradients an AllReduce
// would add (in another order when N > 2, so equal to plain DDP's average up
// to rounding; bitwise with 2 ranks, where a + b = b + a).
// Read before: distributed/zero/zero_sharded_gradients.h.
// Read next: docs/ddp.md (section on ZeRO).
#include "distributed/zero/zero_sharded_gradients.h"

#include <algorithm>

#include "core/native/native.h"
#include "distributed/zero/zero_partition.h"

namespace lockstep::distributed {

namespace {
// Why a comm hook and ZeRO-2 exclude each other, and what to do (both refusals say it).
constexpr const char* kHookVersusZero2 =
    ": a hook reduces whole buckets, ZeRO-2 reduces each gradient only to its owner. Drop the hook, or use "
    "ZeRO-1 (shard_gradients(false)), which works with every hook";
}  // namespace

ShardedGradients::ShardedGradients(BucketReducedHook hook, int64_t piece_bytes, std::vector<int> owner)
    : BucketHandover(std::move(hook), piece_bytes), owner_(std::move(owner)) {}

void ShardedGradients::attached() {
  BucketHandover::attached();
  const int me = rank();
  const int world = reducer().process_group().size();
  LS_CHECK(!started(), "DDP (rank ", me, "): ZeRO-2 (ZeroOptions().shard_gradients(true)) attached after the first "
           "synced forward; call hook_with_zero_step(ddp, optimizer) right after constructing both");
  LS_CHECK(!options().gradient_as_bucket_view(), "DDP (rank ", me, "): ZeRO-2 (ZeroOptions().shard_gradients(true)) "
           "with DDPOptions().gradient_as_bucket_view(true): ZeRO-2 frees the buckets after each backward and "
           "keeps only this rank's gradients, so .grad cannot be a view of them. Drop gradient_as_bucket_view "
           "(ZeRO-2 already keeps less gradient memory than it), or use ZeRO-1");
  LS_CHECK(owner_.size() == parameters().size(), "DDP (rank ", me, "): ZeRO-2 got ", owner_.size(),
           " gradient owners for ", parameters().size(), " parameters");
  for (int r : owner_) {
    LS_CHECK((r >= 0 && r < world) || r == kEveryRank, "DDP (rank ", me, "): ZeRO-2: owner rank ", r,
             " is not in the group of ", world);
  }
  LS_CHECK(!reducer().has_comm_hook(), "DDP (rank ", me, "): ZeRO-2 (ZeroOptions().shard_gradients(true)) with a "
           "registered communication hook", kHookVersusZero2);
  LS_CHECK(!options().deterministic(), "DDP (rank ", me, "): ZeRO-2 (ZeroOptions().shard_gradients(true)) with "
           "DDPOptions().deterministic(true): deterministic mode sums whole buckets in rank order on every rank. "
           "Drop one of the two (ZeRO-1 works with deterministic mode)");
}

void ShardedGradients::check_comm_hook() const {
  LS_CHECK(false, "DDP (rank ", rank(), "): register_comm_hook after hook_with_zero_step attached a ZeRO-2 "
           "optimizer (ZeroOptions().shard_gradients(true))", kHookVersusZero2);
}

bool ShardedGradients::arrange(std::vector<BucketSpec>& specs) const {
  for (BucketSpec& spec : specs) {
    std::stable_sort(spec.param_indices.begin(), spec.param_indices.end(),
                     [this](size_t a, size_t b) { return owner_[a] < owner_[b]; });
  }
  return true;
}

// The bucket's parameters are grouped by owner, so each owner's gradients are
// one segment; reduce (SUM) each to its owner, in slot order (owners
// ascending), the same on every rank; AllReduce (SUM) the segment every rank
// owns (kEveryRank). In pieces with piece_bytes > 0.
CommHook ShardedGradients::reduction() {
  return [this](GradBucket& bucket) {
    ProcessGroup& process_group = reducer().process_group();
    const std::vector<size_t>& params = bucket.parameter_indices();
    const std::vector<int64_t>& offsets = bucket.offsets();
    Tensor& flat = bucket.buffer();  // (numel of the bucket)
    const int64_t piece = piece_numel(flat);
    std::vector<ReductionPiece> pieces;
    for (size_t k = 0; k < params.size();) {
      const int root = owner_[params[k]];
      size_t end = k;
      while (end < params.size() && owner_[params[end]] == root) ++end;
      const int64_t stop = end < params.size() ? offsets[end] : flat.numel();
      reduce_range(flat, offsets[k], stop, piece, [&](Tensor& segment) {  // (root's gradients, or a piece)
        return root == kEveryRank ? process_group.allreduce(segment, ReduceOp::SUM)
                                  : process_group.reduce(segment, root, ReduceOp::SUM);
      }, pieces);
      k = end;
    }
    return pieces_future(std::move(pieces), flat, bucket.index());
  };
}

void ShardedGradients::copy_in(size_t index, bool locally_unused, double scale) {
  Bucket& bucket = storage().buckets()[storage().bucket_of(index)];
  // Freed after the last backward (release): every slot is written before the launch.
  if (!bucket.flat.defined()) bucket.flat = native::empty({bucket.numel()}, bucket.dtype, bucket.device);
  storage().copy_in(index, locally_unused, scale);
  if (!kept(index)) Tensor(parameters()[index]).mutable_grad() = Tensor();  // another rank's
}

bool ShardedGradients::kept(size_t index) const {
  return owner_[index] == rank() || owner_[index] == kEveryRank;
}

void ShardedGradients::release(size_t bucket) { storage().buckets()[bucket].flat = Tensor(); }

}  // namespace lockstep::distributed
