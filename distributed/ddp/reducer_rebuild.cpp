// distributed/ddp/reducer_rebuild.cpp — the Reducer's one-time bucket rebuild in
// the order gradients were seen to become ready.
//
// § Note [Bucket rebuild from the traced order]
// The initial buckets follow reverse registration order, a guess at the order
// gradients become ready. When forward uses modules in a different order than
// they were registered, the guess is wrong: the first bucket waits for a
// gradient computed late, and nothing overlaps (paper Section 6.2.1 names this
// as future work). So the first synced backward records the order in which
// the hooks fire (parameters that got no gradient go last, in reverse
// registration order), and before the second synced iteration DDP calls
// rebuild_buckets(): rank 0's order is broadcast — ranks may observe different
// orders, and all must bucket alike — and every rank recomputes the buckets
// with compute_bucket_assignment(params, order, ...), then the layout hash the
// fingerprint compares (Note [DDP iteration fingerprint]). It happens once, in
// a synced forward, after the forward's fingerprint exchange (so a rank that
// is out of step is caught before the broadcast), and with
// gradient_as_bucket_view the .grad views move to the new buckets. PyTorch
// rebuilds by default and so does lockstep (DDPOptions().rebuild_buckets);
// unlike PyTorch it also rebuilds with find_unused_parameters (any layout is
// correct; the traced one is simply the best guess available).
// The order is recorded by mark_variable_ready (reducer.cpp) for every
// gradient produced on this rank, until the first synced backward completes.
// Read before: distributed/ddp/reducer.cpp, distributed/ddp/bucket_assignment.h.
// Read next: distributed/ddp/reducer_join.cpp.
#include <algorithm>

#include "core/native/native.h"
#include "distributed/ddp/reducer.h"

namespace lockstep::distributed {

void Reducer::record_ready_order(size_t index) {
  if (options_.rebuild_buckets() && !order_traced_ && !rebuilt_) ready_order_.push_back(index);
}

void Reducer::finish_ready_order() {
  if (!options_.rebuild_buckets() || order_traced_ || rebuilt_) return;
  // Parameters whose hook did not fire (unused this iteration) go last.
  std::vector<bool> seen(params_.size(), false);
  for (size_t i : ready_order_) seen[i] = true;
  for (size_t i = params_.size(); i-- > 0;) {
    if (!seen[i]) ready_order_.push_back(i);
  }
  order_traced_ = true;
}

bool Reducer::should_rebuild_buckets() const { return options_.rebuild_buckets() && order_traced_ && !rebuilt_; }

void Reducer::rebuild_buckets(int source_rank) {
  const int rank = process_group_->rank();
  LS_CHECK(!expect_autograd_hooks_, "DDP (rank ", rank, "): rebuild_buckets between a forward and its backward");
  LS_CHECK(rank != source_rank || order_traced_, "DDP (rank ", rank, "): rebuild_buckets from this rank, "
           "which has not traced a ready order (no synced backward has completed here)");
  const int64_t n = static_cast<int64_t>(params_.size());
  Tensor order = native::zeros({n}, kInt64);  // (num params) parameter indices, ready first
  if (order_traced_) std::copy(ready_order_.begin(), ready_order_.end(), order.data_ptr<int64_t>());
  if (process_group_->size() > 1) {
    try {
      process_group_->broadcast(order, source_rank)->wait(process_group_->timeout());
    } catch (const std::exception& e) {
      fail(lockstep::detail::str("DDP (rank ", rank, "): the broadcast of rank ", source_rank, "'s traced "
                                 "gradient order (Note [Bucket rebuild from the traced order]) failed: ", e.what(),
                                 ". A peer rank has probably died or stopped training; if it is only slow, "
                                 "raise LOCKSTEP_TIMEOUT_S.",
                                 observe_.where_others_are(num_buckets(), true)));
    }
  }
  std::vector<size_t> ready_order;
  for (int64_t i : order.to_vector<int64_t>()) {
    if (i < 0 || i >= n) fail(lockstep::detail::str("DDP (rank ", rank, "): rank ", source_rank, "'s traced "
                                                    "gradient order holds parameter index ", i, " but there are ",
                                                    n, " parameters; the ranks wrap different models"));
    ready_order.push_back(static_cast<size_t>(i));
  }
  ready_order_.clear();
  rebuilt_ = true;
  build_buckets(compute_bucket_assignment(params_, ready_order, options_.first_bucket_mb(), options_.bucket_cap_mb()),
                "rebuilt from the traced order");
}

}  // namespace lockstep::distributed
