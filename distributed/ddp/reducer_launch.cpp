// distributed/ddp/reducer_launch.cpp — DDP's own reductions as comm hooks, and the
// checks around a registered one (Note [Every launch through a comm hook]).
// Read before: distributed/ddp/reducer_launch.h.
#include "distributed/ddp/reducer_launch.h"

#include <algorithm>

#include "distributed/ddp/deterministic_reduction.h"
#include "distributed/ddp/reducer_buckets.h"
#include "distributed/ddp/reducer_timeline.h"

namespace lockstep::distributed {

namespace {

// Elements of `flat` per piece when its reduction goes in pieces of `bytes`
// (Note [Handing a bucket over in pieces], reducer_handover.cpp); 0: in one.
int64_t piece_numel(const Tensor& flat, int64_t bytes) {
  if (bytes <= 0) return 0;
  const int64_t n = std::max<int64_t>(64, bytes / static_cast<int64_t>(flat.element_size()) / 64 * 64);
  return flat.numel() > n ? n : 0;
}

// `reduce` over [begin, end) of `flat`, in pieces of `piece` elements (0: one
// call), appended to `pieces` with their ends (Note [A flat result in pieces]).
void reduce_range(Tensor& flat, int64_t begin, int64_t end, int64_t piece,
                  const std::function<std::shared_ptr<Work>(Tensor&)>& reduce,
                  std::vector<TensorFuture::Piece>& pieces) {
  const int64_t step = piece > 0 ? piece : end - begin;
  for (int64_t at = begin; at < end; at += step) {
    Tensor part = flat.narrow(0, at, std::min(step, end - at));  // (piece)
    pieces.push_back({std::min(at + step, end), reduce(part)});
  }
}

// The bucket's future once `pieces` (in order, covering it) are issued; the
// timeline's span ends with the last one.
TensorFuture pieces_future(std::vector<TensorFuture::Piece> pieces, const Tensor& flat, const int64_t& iteration,
                           size_t bucket) {
  if (pieces.empty()) return TensorFuture::ready(flat);  // an empty bucket
  timeline::async_end_when(timeline_key(iteration, bucket), [w = pieces.back().work] { return w->is_completed(); });
  return TensorFuture::from_pieces(std::move(pieces), flat);
}

// The paper's reduction: the bucket holds grad / world; SUM it over the ranks
// (in pieces when a bucket-reduced hook asked for them).
CommHook presummed_allreduce(std::shared_ptr<ProcessGroup> process_group, const int64_t& iteration,
                             const int64_t& piece_bytes) {
  return [process_group = std::move(process_group), &iteration, &piece_bytes](GradBucket& bucket) {
    Tensor& flat = bucket.buffer();  // (numel of the bucket)
    std::vector<TensorFuture::Piece> pieces;
    reduce_range(flat, 0, flat.numel(), piece_numel(flat, piece_bytes),
                 [&](Tensor& t) { return process_group->allreduce(t, ReduceOp::SUM); }, pieces);
    return pieces_future(std::move(pieces), flat, iteration, bucket.index());
  };
}

// Note [Deterministic reduction]: the ranks' scaled buckets added in rank order.
CommHook presummed_rank_ordered_sum(std::shared_ptr<ProcessGroup> process_group) {
  return [process_group = std::move(process_group)](GradBucket& bucket) {
    return rank_ordered_sum(*process_group, bucket.buffer());
  };
}

// Note [ZeRO-2 buckets]: the bucket's parameters are grouped by owner, so each
// owner's gradients are one segment; reduce (SUM) each to its owner, in slot
// order (owners ascending), the same on every rank; AllReduce (SUM) the
// segment every rank owns (kEveryRankOwns).
CommHook presummed_reduce_to_owners(std::shared_ptr<ProcessGroup> process_group, std::vector<int> owner,
                                    const int64_t& iteration, const int64_t& piece_bytes) {
  return [process_group = std::move(process_group), owner = std::move(owner), &iteration,
          &piece_bytes](GradBucket& bucket) {
    const std::vector<size_t>& params = bucket.parameter_indices();
    const std::vector<int64_t>& offsets = bucket.offsets();
    Tensor& flat = bucket.buffer();  // (numel of the bucket)
    const int64_t piece = piece_numel(flat, piece_bytes);
    std::vector<TensorFuture::Piece> pieces;
    for (size_t k = 0; k < params.size();) {
      const int root = owner[params[k]];
      size_t end = k;
      while (end < params.size() && owner[params[end]] == root) ++end;
      const int64_t stop = end < params.size() ? offsets[end] : flat.numel();
      reduce_range(flat, offsets[k], stop, piece, [&](Tensor& segment) {  // (root's gradients, or a piece)
        return root == kEveryRankOwns ? process_group->allreduce(segment, ReduceOp::SUM)
                                      : process_group->reduce(segment, root, ReduceOp::SUM);
      }, pieces);
      k = end;
    }
    return pieces_future(std::move(pieces), flat, iteration, bucket.index());
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
  hook_ = presummed_reduce_to_owners(process_group_, std::move(owner), iteration_, piece_bytes_);
  to_owners_ = true;
}

BucketLauncher::BucketLauncher(std::shared_ptr<ProcessGroup> process_group, const DDPOptions& options,
                               const int64_t& iteration)
    : process_group_(std::move(process_group)), iteration_(iteration), deterministic_(options.deterministic()) {
  hook_ = deterministic_ ? presummed_rank_ordered_sum(process_group_)
                         : presummed_allreduce(process_group_, iteration_, piece_bytes_);
}

void BucketLauncher::reduce_in_pieces(int64_t bytes) {
  LS_CHECK(bytes >= 0, "DDP (rank ", process_group_->rank(), "): the reduction's piece size must be >= 0 bytes, "
           "got ", bytes);
  piece_bytes_ = bytes;
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
