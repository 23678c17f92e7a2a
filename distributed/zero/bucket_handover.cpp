// distributed/zero/bucket_handover.cpp — the bucket hand-over plug-in: when a
// bucket is finalized, and the hook after its copy-out.
//
// § Note [Finalizing buckets during backward]
// With a bucket-reduced hook (ZeRO's overlap: a shard step and the broadcast
// of the updated parameters per bucket) waiting until the end of backward
// would put every broadcast after the backward compute, where only the last
// reductions are left to overlap them. So when bucket b is launched, bucket
// b - kFinalizeLag is finalized at once — its reduction waited for (launched
// kFinalizeLag buckets earlier, usually done by then; the ones in between keep
// the link busy meanwhile), its averages copied out, the hook run — and
// finalize_backward does the rest. (A lag of 2 blocked backward on ZeRO-1's
// AllReduces queued behind the broadcasts, 4 did not: docs/results/distributed_choices.md.)
// The position depends only on the launch order, the same on every rank, so
// the hook's collectives still pair up (Note [After a bucket is reduced]). It
// is exact: a bucket is launched only when all its gradients are final, and
// a gradient is final only when every node of the graph that uses the
// parameter has run, so no later node of this backward reads a parameter the
// hook updates. Only with the default readiness (every parameter used): with
// find_unused_parameters or static_graph the copy-out needs the used-parameter
// bitmap, which is known only at the end (ReducerPlugin::finalize_now).
// Read before: distributed/zero/bucket_handover.h.
// Read next: distributed/zero/bucket_handover_pieces.cpp.
#include "distributed/zero/bucket_handover.h"

#include <algorithm>

#include "distributed/ddp/reducer_timeline.h"

namespace lockstep::distributed {

namespace {
constexpr size_t kFinalizeLag = 4;  // buckets
}  // namespace

BucketHandover::BucketHandover(BucketReducedHook hook, int64_t piece_bytes)
    : piece_bytes_(piece_bytes), hook_(std::move(hook)) {}

void BucketHandover::attached() {
  LS_CHECK(hook_ != nullptr, "DDP (rank ", rank(), "): register_bucket_reduced_hook was given an empty hook");
  LS_CHECK(piece_bytes_ >= 0, "DDP (rank ", rank(), "): register_bucket_reduced_hook: the piece size must be >= 0 "
           "bytes, got ", piece_bytes_);
}

void BucketHandover::bucket_launched(size_t bucket) {
  if (bucket + 1 >= kFinalizeLag) finalize_now(bucket + 1 - kFinalizeLag);
}

void BucketHandover::finalize_bucket(size_t bi, const std::vector<int64_t>& global_used) {
  const bool handed_over = piece_bytes_ > 0 && global_used.empty() && finalize_in_pieces(bi);
  if (bi < pieces_.size()) pieces_[bi].clear();  // this launch's (Note [A flat result in pieces])
  if (handed_over) return;
  const Bucket& b = storage().buckets()[bi];
  const Tensor result = wait_for_bucket(bi);  // (numel of the bucket)
  const auto reduced_at = std::chrono::steady_clock::now();
  // Parameters this rank does not keep are left alone, as globally unused ones are.
  std::vector<int64_t> copied = global_used;
  for (size_t i : b.param_indices) {
    if (kept(i)) continue;
    if (copied.empty()) copied.assign(parameters().size(), 1);
    copied[i] = 0;
  }
  storage().copy_out(bi, result, copied);
  const GradientWait reduced = [reduced_at](size_t, int64_t) { return reduced_at; };
  or_fail([&] { hook_(bi, b.param_indices, reduced); });  // Note [After a bucket is reduced]
  release(bi);
}

int64_t BucketHandover::piece_numel(const Tensor& flat) const {
  if (piece_bytes_ <= 0) return 0;
  const int64_t n = std::max<int64_t>(64, piece_bytes_ / static_cast<int64_t>(flat.element_size()) / 64 * 64);
  return flat.numel() > n ? n : 0;
}

TensorFuture BucketHandover::pieces_future(std::vector<ReductionPiece> pieces, const Tensor& flat, size_t bucket) {
  if (pieces_.size() <= bucket) pieces_.resize(bucket + 1);
  pieces_[bucket].clear();
  if (pieces.empty()) return TensorFuture::ready(flat);  // an empty bucket
  int64_t end = 0;
  std::vector<std::shared_ptr<Work>> works;
  for (const ReductionPiece& p : pieces) {
    LS_CHECK(p.work != nullptr && p.end > end, "DDP (rank ", rank(), "): the reduction of bucket ", bucket,
             " issued a null collective or pieces whose ends do not ascend (", p.end, " after ", end, ")");
    end = p.end;
    works.push_back(p.work);
  }
  LS_CHECK(end == flat.numel(), "DDP (rank ", rank(), "): the reduction of bucket ", bucket,
           " in pieces ends at element ", end, " but the bucket has ", flat.numel());
  timeline::async_end_when(timeline_key(backwards(), bucket), [w = pieces.back().work] { return w->is_completed(); });
  pieces_[bucket] = std::move(pieces);
  return TensorFuture::from_works(std::move(works), flat);
}

const std::vector<ReductionPiece>& BucketHandover::pieces(size_t bucket) const {
  static const std::vector<ReductionPiece> none;
  return bucket < pieces_.size() ? pieces_[bucket] : none;
}

// DDP's AllReduce of the bucket (which holds grad / world), in pieces.
CommHook BucketHandover::reduction() {
  if (piece_bytes_ == 0) return nullptr;
  return [this](GradBucket& bucket) {
    Tensor& flat = bucket.buffer();  // (numel of the bucket)
    std::vector<ReductionPiece> pieces;
    reduce_range(flat, 0, flat.numel(), piece_numel(flat),
                 [&](Tensor& t) { return reducer().process_group().allreduce(t, ReduceOp::SUM); }, pieces);
    return pieces_future(std::move(pieces), flat, bucket.index());
  };
}

void reduce_range(Tensor& flat, int64_t begin, int64_t end, int64_t piece,
                  const std::function<std::shared_ptr<Work>(Tensor&)>& reduce, std::vector<ReductionPiece>& pieces) {
  const int64_t step = piece > 0 ? piece : end - begin;
  for (int64_t at = begin; at < end; at += step) {
    Tensor part = flat.narrow(0, at, std::min(step, end - at));  // (piece)
    pieces.push_back({std::min(at + step, end), reduce(part)});
  }
}

}  // namespace lockstep::distributed
