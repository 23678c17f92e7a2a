// distributed/zero/bucket_handover.h — a Reducer plug-in (Note [Reducer plug-ins])
// that hands each reduced bucket to a hook, from which ZeRO's overlap steps each
// bucket's shard (distributed/zero/zero_overlap.h). ZeRO-2's plug-in extends it
// (distributed/zero/zero_sharded_gradients.h). DDP itself does not know it
// exists: it is attached to a DDP module after its construction,
//
//   register_bucket_reduced_hook(ddp, hook, piece_bytes);  // once, before the first backward
//
//   hook(bucket index, its parameters' indices, wait)
// runs right after that bucket's averaged gradients are in .grad, bucket by
// bucket in index order, on every rank alike; it may start collectives
// (Note [After a bucket is reduced]). The first buckets are handed over during
// backward already (Note [Finalizing buckets during backward]). wait(k, end)
// returns once elements [0, end) of the bucket's k-th parameter's .grad hold
// their averages: at once, unless piece_bytes > 0 (Note [Handing a bucket over
// in pieces], bucket_handover_pieces.cpp): then DDP's own reductions go in
// pieces of that size, the hook gets a bucket whose reduction may still be in
// flight, and must call wait before it reads a gradient. wait returns when the
// last collective it covered had completed.
//
// § Note [After a bucket is reduced]
// The hook runs where a comm hook's continuations run (Note [Continuations run
// on the waiting thread]): on the compute thread, after the bucket's
// copy-out, in bucket index order — for the first buckets already during
// backward, at fixed points of the launch order (Note [Finalizing buckets
// during backward]), for the rest in finalize_backward. So every rank calls it
// with the same buckets in the same order — collectives it starts pair up —
// and it sees the .grad an optimizer would see after backward (averaged,
// globally unused parameters untouched), whatever reduced the bucket
// (AllReduce, a comm hook, deterministic mode). The later buckets' reductions
// are still in flight meanwhile.
//
// § Note [A flat result in pieces]
// With piece_bytes > 0 a bucket's flat buffer is written by several
// collectives, piece k covering elements [pieces[k-1].end, pieces[k].end)
// (reduce_range). The bucket's TensorFuture waits for all of them, as any
// future of several works does (TensorFuture::from_works); the plug-in keeps
// the pieces beside it (pieces(bucket)), so that the hand-over can wait for a
// prefix only and start on it while the rest is still on the wire (Note
// [Handing a bucket over in pieces]). They are kept from the bucket's launch
// to the end of its finalize; a bucket reduced by a comm hook or by
// deterministic mode has none.
//
// Read before: distributed/ddp/reducer_plugin.h, distributed/process_group/tensor_future.h.
// Read next: distributed/zero/bucket_handover.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/ddp/reducer_plugin.h"

namespace lockstep::distributed {

// One collective of a bucket reduced in pieces: it writes the bucket's
// elements up to `end` (exclusive) from the previous piece's end (Note [A flat
// result in pieces]).
struct ReductionPiece {
  int64_t end = 0;
  std::shared_ptr<Work> work;
};

class BucketHandover : public ReducerPlugin {
 public:
  // wait(slot, end): elements [0, end) of the bucket's slot-th parameter's .grad
  // hold their averages; returns when the last collective covering them completed.
  using GradientWait = std::function<std::chrono::steady_clock::time_point(size_t slot, int64_t end)>;
  using BucketReducedHook = std::function<void(size_t, const std::vector<size_t>&, const GradientWait&)>;

  BucketHandover(BucketReducedHook hook, int64_t piece_bytes);

  void attached() override;
  CommHook reduction() override;  // the AllReduce in pieces, with piece_bytes > 0
  void bucket_launched(size_t bucket) override;  // Note [Finalizing buckets during backward]
  void finalize_bucket(size_t bucket, const std::vector<int64_t>& global_used) override;
  bool consumes_gradients() const override { return true; }
  // The pieces of the bucket's reduction in flight: from its launch to the end
  // of its finalize, when it was reduced in pieces; empty otherwise.
  const std::vector<ReductionPiece>& pieces(size_t bucket) const;

 protected:
  // What ZeRO-2 changes (distributed/zero/zero_sharded_gradients.h): which
  // gradients this rank keeps after their reduction (copy_out skips the
  // others), and what happens to a bucket once it is handed over.
  virtual bool kept(size_t index) const { (void)index; return true; }
  virtual void release(size_t bucket) { (void)bucket; }
  // Elements of `flat` per piece (0: in one piece).
  int64_t piece_numel(const Tensor& flat) const;
  // The bucket's future once `pieces` (in order, covering `flat`) are issued;
  // the pieces are kept for its finalize (Note [A flat result in pieces]); the
  // timeline's span of the bucket ends with the last one.
  TensorFuture pieces_future(std::vector<ReductionPiece> pieces, const Tensor& flat, size_t bucket);

  int64_t piece_bytes_;

 private:
  // bucket_handover_pieces.cpp: the hand-over while the pieces arrive; false
  // if it cannot be (no pieces, or a .grad that is not contiguous).
  bool finalize_in_pieces(size_t bucket);
  bool prepare_pieces(size_t bucket);
  void copy_out_range(size_t bucket, int64_t from, int64_t to);

  BucketReducedHook hook_;
  std::vector<std::vector<ReductionPiece>> pieces_;  // per bucket (Note [A flat result in pieces])
};

// `reduce` over [begin, end) of `flat`, in pieces of `piece` elements (0: one
// call), appended to `pieces` with their ends (Note [A flat result in pieces]).
void reduce_range(Tensor& flat, int64_t begin, int64_t end, int64_t piece,
                  const std::function<std::shared_ptr<Work>(Tensor&)>& reduce, std::vector<ReductionPiece>& pieces);

// Attaches the bucket hand-over to `ddp`'s Reducer (Note [Reducer plug-ins]):
// hook(bucket index, its parameters' indices, wait) after each bucket's
// averages are in .grad; piece_bytes > 0: handed over while the reduction
// arrives in pieces of that size. Once, before the first backward; used by
// hook_with_zero_step (zero_overlap.h). Returns the plug-in, which lives as
// long as `ddp`.
template <class M>
const BucketHandover& register_bucket_reduced_hook(DistributedDataParallel<M>& ddp,
                                                   BucketHandover::BucketReducedHook hook, int64_t piece_bytes = 0) {
  auto plugin = std::make_unique<BucketHandover>(std::move(hook), piece_bytes);
  const BucketHandover& attached = *plugin;
  ddp.attach_reducer_plugin(std::move(plugin));
  return attached;
}

}  // namespace lockstep::distributed
