// distributed/ddp/reducer_handover.cpp — handing a bucket to the bucket-reduced
// hook while its reduction is still arriving, piece by piece.
//
// § Note [Handing a bucket over in pieces]
// ZeRO's overlap steps a bucket's parameters as soon as the bucket is reduced
// and broadcasts them (Note [ZeRO overlap with DDP]). For the last buckets of
// backward that is the critical path: BERT-base's word embeddings (89 MB, the
// last gradient ready, a bucket of their own) were reduced whole, then
// stepped, then broadcast, and the optimizer's time after the last reduction
// was that 89 MB broadcast. With register_bucket_reduced_hook(hook,
// piece_bytes > 0) three things change:
//  1. DDP's own reduction goes in collectives of piece_bytes each (the
//     AllReduce of the bucket, or ZeRO-2's reduce of each owner's segment, cut
//     into pieces: reducer_launch.cpp); the bucket's future knows the pieces
//     (Note [A flat result in pieces], tensor_future.h);
//  2. finalize_bucket hands the bucket to the hook at once, without waiting:
//     every kept parameter gets a contiguous .grad to be filled
//     (BucketStorage::prepare_pieces), and the hook's wait(k, end) waits for
//     the pieces up to element `end` of the k-th parameter, in order, copying
//     each into .grad as it arrives (copy_out_range);
//  3. after the hook returns, the rest is waited for and copied out as before.
// So the owner steps piece p of a large parameter as soon as piece p is
// reduced (Note [Stepping in chunks]) and starts its broadcast while pieces
// p+1, ... are still being reduced; what remains after the last reduction is
// the last piece's step and broadcast.
// Why it is exact: each element of .grad is written once, from the same
// reduced value the whole copy-out would write (the pieces are the same sums,
// cut at other places), before anything reads it — the hook reads only
// through wait. Why the ranks pair up: the pieces are cut from the bucket's
// size alone, the same on every rank, and issued at launch; the hook is
// called at the same point as before (Note [Finalizing buckets during
// backward]) and issues its collectives in its own fixed order — waiting does
// not change the order, only when it happens. Only with the default readiness
// (every parameter used; the global bitmap is not needed to copy out) and DDP's
// own reduction: a registered comm hook or deterministic mode returns a whole
// result (no pieces), which is handed over whole as before.
// Read before: distributed/ddp/reducer.cpp (Note [After a bucket is reduced]).
// Read next: distributed/zero/zero_overlap.cpp.
#include <algorithm>

#include "distributed/ddp/reducer.h"

namespace lockstep::distributed {

bool Reducer::finalize_in_pieces(size_t bi) {
  Bucket& b = storage_.buckets()[bi];
  const std::vector<TensorFuture::Piece> pieces = b.future.pieces();  // a copy: waiting clears them
  if (pieces.empty() || !storage_.prepare_pieces(bi)) return false;
  size_t next = 0;   // pieces[next]: the first not yet copied out
  int64_t done = 0;  // elements of the bucket in .grad
  std::chrono::steady_clock::time_point completed{};  // the latest completion among pieces[0, next)
  const auto wait_through = [&](int64_t end) {
    while (done < end && next < pieces.size()) {
      wait_or_fail([&] { pieces[next].work->wait(process_group_->timeout()); }, bi);
      completed = std::max(completed, pieces[next].work->completed_at());
      storage_.copy_out_range(bi, done, pieces[next].end);
      done = pieces[next++].end;
    }
    return completed;
  };
  const GradientWait wait = [&](size_t slot, int64_t end) {
    LS_CHECK(slot < b.offsets.size() && end >= 0 && end <= b.lengths[slot], "DDP (rank ", process_group_->rank(),
             "): a bucket-reduced hook waited for elements [0, ", end, ") of parameter ", slot, " of bucket ", bi,
             ", which holds ", b.offsets.size(), " parameters",
             slot < b.lengths.size() ? lockstep::detail::str(" (that one has ", b.lengths[slot], " elements)") : "");
    return wait_through(b.offsets[slot] + end);
  };
  or_fail([&] { bucket_reduced_(bi, b.param_indices, wait); });
  wait_through(b.flat.numel());
  wait_or_fail([&] { b.future.wait(process_group_->timeout()); }, bi);  // done by now; releases the works
  last_reduced_at_ = completed;
  observe_.bucket_reduced(bi);
  b.future = TensorFuture();
  storage_.release(bi);  // under ZeRO-2 only (Note [ZeRO-2 buckets])
  return true;
}

}  // namespace lockstep::distributed
