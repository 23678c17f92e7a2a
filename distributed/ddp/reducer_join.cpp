// distributed/ddp/reducer_join.cpp — what the Reducer of a rank that has joined
// does instead of training: it issues, contributing nothing, the collectives
// the still-training ranks' synced forward and backward issue, in the same
// order (Note [Join: shadowing the collectives] in distributed/ddp/ddp_join.h).
//
// The other ranks' iteration, collective by collective, and its shadow here:
//   forward fingerprint allgather   ->  allgather of a JOINED fingerprint
//   (bucket rebuild, buffer broadcasts: DDP's JoinState does those)
//   used-parameter bitmap AllReduce ->  AllReduce of zeros
//   backward fingerprint allgather  ->  allgather of a JOINED fingerprint
//   (static_graph, first backward: the bitmap comes here, Note [Static graph])
//   bucket AllReduces / comm hooks  ->  the same, on zero-filled buckets
//   hooks' later stages (finalize)  ->  waited for in bucket order, likewise
// The bitmaps are the readiness policy's (Note [Readiness policies]). The
// counters of synced forwards and backwards advance as if this rank had
// trained, so after join() every rank's fingerprint agrees again.
// Read before: distributed/ddp/reducer.cpp, distributed/ddp/ddp_join.h.
#include "core/native/native.h"
#include "distributed/ddp/reducer.h"

namespace lockstep::distributed {

void Reducer::shadow_synced_forward(bool exchange_fingerprint) {
  or_fail([&] { observe_.forward_started(exchange_fingerprint, /*joined=*/true); });
}

void Reducer::shadow_backward() {
  readiness_->shadow_before_fingerprint();
  or_fail([&] {
    observe_.backward_started(detail::DDPPhase::JOINED);
    observe_.before_first_launch();
  });
  readiness_->shadow_after_fingerprint();
  std::vector<TensorFuture> futures;
  for (size_t bi = 0; bi < num_buckets(); ++bi) {
    // Zeros of the bucket's size, never the bucket itself: with
    // gradient_as_bucket_view it holds this rank's .grad.
    futures.push_back(launch(bi, native::zeros_like(storage_.buckets()[bi].flat)));
  }
  observe_.buckets_launched(num_buckets());
  readiness_->shadow_wait(bitmap_wait());
  for (size_t bi = 0; bi < num_buckets(); ++bi) {
    wait_or_fail([&] { futures[bi].wait(process_group_->timeout()); }, bi);
  }
  observe_.backward_finished({}, {}, /*tracks=*/false);
}

}  // namespace lockstep::distributed
