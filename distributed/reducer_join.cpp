// distributed/reducer_join.cpp — what the Reducer of a rank that has joined
// does instead of training: it issues, contributing nothing, the collectives
// the still-training ranks' synced forward and backward issue, in the same
// order (Note [Join: shadowing the collectives] in distributed/ddp_join.h).
//
// The other ranks' iteration, collective by collective, and its shadow here:
//   forward fingerprint allgather   ->  allgather of a JOINED fingerprint
//   (bucket rebuild, buffer broadcasts: DDP's JoinState does those)
//   used-parameter bitmap AllReduce ->  AllReduce of zeros
//   backward fingerprint allgather  ->  allgather of a JOINED fingerprint
//   (static_graph, first backward: the bitmap comes here, Note [Static graph])
//   bucket AllReduces / comm hooks  ->  the same, on zero-filled buckets
//   hooks' later stages (finalize)  ->  waited for in bucket order, likewise
// The counters of synced forwards and backwards advance as if this rank had
// trained, so after join() every rank's fingerprint agrees again.
// Read before: distributed/reducer.cpp, distributed/ddp_join.h.
#include "core/native/native.h"
#include "distributed/reducer.h"

namespace lockstep::distributed {

void Reducer::shadow_synced_forward(bool exchange_fingerprint) {
  ++synced_forwards_;
  if (!exchange_fingerprint) return;
  start_fingerprint(detail::DDPPhase::JOINED);
  finish_fingerprint();
}

void Reducer::shadow_backward() {
  std::shared_ptr<Work> bitmap;
  Tensor zeros_used;
  if (options_.find_unused_parameters() && !options_.static_graph()) {
    zeros_used = native::zeros({static_cast<int64_t>(params_.size())}, kInt64);  // (num params)
    bitmap = process_group_->allreduce(zeros_used, ReduceOp::SUM);
    ++bitmap_allreduces_;
  }
  ++synced_backwards_;
  record_progress(0, false);
  start_fingerprint(detail::DDPPhase::JOINED);
  finish_fingerprint();
  if (options_.static_graph() && !static_used_known_) {
    // Note [Static graph]: the others' first backward AllReduces the bitmap at
    // its end, before the buckets; this rank learns the used set from it.
    zeros_used = native::zeros({static_cast<int64_t>(params_.size())}, kInt64);  // (num params)
    bitmap = process_group_->allreduce(zeros_used, ReduceOp::SUM);
    ++bitmap_allreduces_;
  }
  std::vector<TensorFuture> futures;
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    // Zeros of the bucket's size, never the bucket itself: with
    // gradient_as_bucket_view it holds this rank's .grad.
    futures.push_back(launch(bi, native::zeros_like(buckets_[bi].flat)));
  }
  record_progress(buckets_.size(), false);
  if (bitmap) wait_or_fail([&] { bitmap->wait(process_group_->timeout()); }, buckets_.size());
  if (bitmap && options_.static_graph()) {
    static_global_used_ = zeros_used.to_vector<int64_t>();
    static_used_known_ = true;
  }
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    wait_or_fail([&] { futures[bi].wait(process_group_->timeout()); }, bi);
  }
  record_progress(buckets_.size(), true);
}

}  // namespace lockstep::distributed
