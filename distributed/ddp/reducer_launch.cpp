// distributed/ddp/reducer_launch.cpp — DDP's own reductions as comm hooks, and the
// checks around a registered one (Note [Every launch through a comm hook]).
// Read before: distributed/ddp/reducer_launch.h.
#include "distributed/ddp/reducer_launch.h"

#include "distributed/comm_hooks/deterministic_hook.h"
#include "distributed/ddp/reducer_buckets.h"
#include "distributed/ddp/reducer_timeline.h"

namespace lockstep::distributed {

namespace {

// The paper's reduction: the bucket holds grad / world; SUM it over the ranks.
CommHook presummed_allreduce(std::shared_ptr<ProcessGroup> process_group, const int64_t& iteration) {
  return [process_group = std::move(process_group), &iteration](GradBucket& bucket) {
    auto work = process_group->allreduce(bucket.buffer(), ReduceOp::SUM);
    timeline::async_end_when(timeline_key(iteration, bucket.index()), [work] { return work->is_completed(); });
    return TensorFuture::from_work(std::move(work), bucket.buffer());
  };
}

// Note [Deterministic reduction]: the ranks' scaled buckets added in rank order.
CommHook presummed_rank_ordered_sum(std::shared_ptr<ProcessGroup> process_group) {
  return [process_group = std::move(process_group)](GradBucket& bucket) {
    return comm_hooks::rank_ordered_sum(*process_group, bucket.buffer());
  };
}

// Note [ZeRO-2 buckets]: the bucket's parameters are grouped by owner, so each
// owner's gradients are one segment; reduce (SUM) each to its owner, in slot
// order (owners ascending), the same on every rank; AllReduce (SUM) the
// segment every rank owns (kEveryRankOwns).
CommHook presummed_reduce_to_owners(std::shared_ptr<ProcessGroup> process_group, std::vector<int> owner,
                                    const int64_t& iteration) {
  return [process_group = std::move(process_group), owner = std::move(owner), &iteration](GradBucket& bucket) {
    const std::vector<size_t>& params = bucket.parameter_indices();
    const std::vector<int64_t>& offsets = bucket.offsets();
    Tensor& flat = bucket.buffer();  // (numel of the bucket)
    std::vector<std::shared_ptr<Work>> works;
    for (size_t k = 0; k < params.size();) {
      const int root = owner[params[k]];
      size_t end = k;
      while (end < params.size() && owner[params[end]] == root) ++end;
      const int64_t stop = end < params.size() ? offsets[end] : flat.numel();
      Tensor segment = flat.narrow(0, offsets[k], stop - offsets[k]);  // (root's gradients)
      works.push_back(root == kEveryRankOwns ? process_group->allreduce(segment, ReduceOp::SUM)
                                             : process_group->reduce(segment, root, ReduceOp::SUM));
      k = end;
    }
    if (!works.empty()) {
      timeline::async_end_when(timeline_key(iteration, bucket.index()), [w = works.back()] { return w->is_completed(); });
    }
    return TensorFuture::from_works(std::move(works), flat);
  };
}

// Why a comm hook and ZeRO-2 exclude each other, and what to do (both refusals say it).
constexpr const char* kHookVersusZero2 =
    ": a hook reduces whole buckets, ZeRO-2 reduces each gradient only to its owner. Drop the hook, or use "
    "ZeRO-1 (shard_gradients(false)), which works with every hook";

}  // namespace

void BucketLauncher::reduce_to_owners(std::vector<int> owner) {
  const int rank = process_group_->rank();
  LS_CHECK(!registered_, "DDP (rank ", rank, "): ZeRO-2 (ZeroOptions().shard_gradients(true)) with a registered "
           "communication hook", kHookVersusZero2);
  LS_CHECK(!deterministic_, "DDP (rank ", rank, "): ZeRO-2 (ZeroOptions().shard_gradients(true)) with "
           "DDPOptions().deterministic(true): deterministic mode sums whole buckets in rank order on every rank. "
           "Drop one of the two (ZeRO-1 works with deterministic mode)");
  hook_ = presummed_reduce_to_owners(process_group_, std::move(owner), iteration_);
  to_owners_ = true;
}

BucketLauncher::BucketLauncher(std::shared_ptr<ProcessGroup> process_group, const DDPOptions& options,
                               const int64_t& iteration)
    : process_group_(std::move(process_group)), iteration_(iteration), deterministic_(options.deterministic()) {
  hook_ = deterministic_ ? presummed_rank_ordered_sum(process_group_) : presummed_allreduce(process_group_, iteration_);
}

void BucketLauncher::register_hook(CommHook hook, bool started) {
  const int rank = process_group_->rank();
  LS_CHECK(hook != nullptr, "DDP (rank ", rank, "): register_comm_hook was given an empty hook");
  LS_CHECK(!registered_, "DDP (rank ", rank, "): register_comm_hook can be called only once; "
           "a communication hook is already registered");
  LS_CHECK(!started, "DDP (rank ", rank, "): register_comm_hook "
           "must be called before the first synced forward/backward (buckets already hold gradients "
           "scaled for the default AllReduce). Register it right after constructing DistributedDataParallel");
  LS_CHECK(!to_owners_, "DDP (rank ", rank, "): register_comm_hook after hook_with_zero_step attached a ZeRO-2 "
           "optimizer (ZeroOptions().shard_gradients(true))", kHookVersusZero2);
  LS_CHECK(!deterministic_, "DDP (rank ", rank, "): register_comm_hook with DDPOptions().deterministic(true): "
           "deterministic mode reduces every bucket itself (Note [Deterministic reduction]); drop the option, or "
           "register comm_hooks::deterministic_allreduce_hook without it");
  hook_ = std::move(hook);
  registered_ = true;
}

TensorFuture BucketLauncher::launch(GradBucket& bucket) const {
  if (!registered_) return hook_(bucket);
  TensorFuture future;
  try {
    future = hook_(bucket);
  } catch (const std::exception& e) {
    throw CommHookError(lockstep::detail::str("DDP (rank ", process_group_->rank(), "): the communication hook "
                                              "failed on bucket ", bucket.index(), ": ", e.what()));
  }
  if (!future.valid()) {
    throw CommHookError(lockstep::detail::str("DDP (rank ", process_group_->rank(), "): the communication hook "
                                              "returned an empty TensorFuture for bucket ", bucket.index(),
                                              "; return TensorFuture::ready(t) or TensorFuture::from_work(work, t)"));
  }
  return future;
}

const char* BucketLauncher::what_reduces() const {
  if (to_owners_) return "the reduce to the owners (ZeRO-2) of bucket ";
  return registered_ ? "the communication hook of bucket " : "the AllReduce of bucket ";
}

}  // namespace lockstep::distributed
