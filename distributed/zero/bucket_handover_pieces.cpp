// distributed/zero/bucket_handover_pieces.cpp — handing a bucket to the
// bucket-reduced hook while its reduction is still arriving, piece by piece.
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
//     AllReduce of the bucket, BucketHandover::reduction, or ZeRO-2's reduce of
//     each owner's segment, cut into pieces); the plug-in keeps the
//     pieces (Note [A flat result in pieces], bucket_handover.h);
//  2. finalize_bucket hands the bucket to the hook at once, without waiting:
//     every kept parameter gets a contiguous .grad to be filled
//     (prepare_pieces), and the hook's wait(k, end) waits for the pieces up to
//     element `end` of the k-th parameter, in order, copying each into .grad
//     as it arrives (copy_out_range);
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
// Read before: distributed/zero/bucket_handover.cpp.
// Read next: distributed/zero/zero_overlap.h.
#include <algorithm>

#include "core/grad_mode.h"
#include "core/native/native.h"
#include "distributed/zero/bucket_handover.h"


namespace lockstep::distributed {

bool BucketHandover::finalize_in_pieces(size_t bi) {
  const Bucket& b = storage().buckets()[bi];
  const std::vector<ReductionPiece>& pieces = this->pieces(bi);  // this launch's
  if (pieces.empty() || !prepare_pieces(bi)) return false;
  const std::chrono::milliseconds timeout = reducer().process_group().timeout();
  size_t next = 0;   // pieces[next]: the first not yet copied out
  int64_t done = 0;  // elements of the bucket in .grad
  std::chrono::steady_clock::time_point completed{};  // the latest completion among pieces[0, next)
  const auto wait_through = [&](int64_t end) {
    while (done < end && next < pieces.size()) {
      wait_or_fail([&] { pieces[next].work->wait(timeout); }, bi);
      completed = std::max(completed, pieces[next].work->completed_at());
      copy_out_range(bi, done, pieces[next].end);
      done = pieces[next++].end;
    }
    return completed;
  };
  const GradientWait wait = [&](size_t slot, int64_t end) {
    LS_CHECK(slot < b.offsets.size() && end >= 0 && end <= b.lengths[slot], "DDP (rank ", rank(),
             "): a bucket-reduced hook waited for elements [0, ", end, ") of parameter ", slot, " of bucket ", bi,
             ", which holds ", b.offsets.size(), " parameters",
             slot < b.lengths.size() ? lockstep::detail::str(" (that one has ", b.lengths[slot], " elements)") : "");
    return wait_through(b.offsets[slot] + end);
  };
  or_fail([&] { hook_(bi, b.param_indices, wait); });
  wait_through(b.flat.numel());
  wait_for_bucket(bi);  // done by now; releases the works
  release(bi);
  return true;
}

// Every kept parameter gets a contiguous .grad to fill: its own, a new
// uninitialized one, or its bucket view; false if one is not contiguous.
bool BucketHandover::prepare_pieces(size_t bi) {
  Bucket& b = storage().buckets()[bi];
  const bool as_view = storage().as_view();
  for (size_t i : b.param_indices) {
    const Tensor& grad = parameters()[i].grad();
    if (kept(i) && !as_view && grad.defined() && !grad.is_contiguous()) return false;
  }
  b.flat.bump_version();
  for (size_t i : b.param_indices) {
    if (!kept(i)) continue;
    Tensor param = parameters()[i];
    Tensor& grad = param.mutable_grad();
    if (as_view) {
      if (!grad.defined() || !storage().is_view(i, grad)) grad = storage().view(i);
    } else if (!grad.defined()) {
      grad = native::empty(param.sizes(), b.flat.dtype(), b.flat.device());  // filled piece by piece
    } else {
      grad.bump_version();
    }
  }
  return true;
}

// The bucket's elements [from, to), already reduced in place in its flat buffer, into .grad.
void BucketHandover::copy_out_range(size_t bi, int64_t from, int64_t to) {
  NoGradGuard no_grad;
  const Bucket& b = storage().buckets()[bi];
  if (storage().as_view()) return;  // the slices are the .grad
  for (size_t k = 0; k < b.param_indices.size(); ++k) {
    const int64_t lo = std::max(from, b.offsets[k]);
    const int64_t hi = std::min(to, b.offsets[k] + b.lengths[k]);
    const size_t i = b.param_indices[k];
    if (lo >= hi || !kept(i)) continue;
    const Tensor& param = parameters()[i];
    Tensor grad = native::view(param.grad(), {param.numel()});  // (numel), contiguous (prepare_pieces)
    native::copy_(grad.narrow(0, lo - b.offsets[k], hi - lo), b.flat.narrow(0, lo, hi - lo));
  }
}

}  // namespace lockstep::distributed
