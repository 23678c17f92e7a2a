// distributed/reducer_buckets.cpp — the Reducer's buckets: building them from
// a BucketSpec list, gradients as views into them, and rebuilding them once in
// the order gradients were seen to become ready.
//
// Note [Gradients as bucket views]
// With DDPOptions().gradient_as_bucket_view(true) each parameter's .grad is a
// view of its slice of the bucket's flat buffer (contiguous, shaped like the
// parameter). AccumulateGrad adds into an existing .grad in place, so the
// gradient lands in the bucket directly: the hook only scales the slot by
// 1/world (no copy in), the AllReduce then writes the average where .grad
// already points (no copy out), and the separate gradient-sized buffer of the
// copy mode does not exist. The view is set up lazily, like PyTorch's: the
// first time a hook finds .grad not in its slot (first iteration, after
// optimizer.zero_grad() — whose default set_to_none drops .grad —, after a
// rebuild), it copies the gradient in once and points .grad at the slot.
// zero_grad(/*set_to_none=*/false) zeroes the slot in place and keeps the view,
// so steady-state iterations copy nothing. Two cases need care: a locally
// unused parameter (find_unused_parameters) whose .grad is already the slot
// gets its own copy before the slot is scaled, because if it turns out
// globally unused its .grad must stay as it was; and globally used parameters
// whose .grad is not a view get pointed at the slot in finalize_backward.
//
// Note [Bucket rebuild from the traced order]
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
//
// Note [DDP on CUDA]
// Nothing in the Reducer waits for the GPU. Buckets are allocated on their
// parameters' device (the assignment already groups by device and dtype), so a
// CUDA gradient is copied into its CUDA bucket by a kernel queued on the
// compute stream from the autograd hook, exactly where the CPU path copies.
// When a bucket is full its AllReduce is issued from the same thread: NCCL's
// comm stream first waits on an event recorded on the compute stream, so it
// sees every copy queued before (Note [NCCL stream isolation]); Gloo copies the
// bucket to pinned host memory after those copies and reduces it on its own
// threads (Note [Gloo with CUDA tensors]). finalize_backward's wait() makes
// the compute stream wait for each bucket, and the copy-out (or, with
// gradient_as_bucket_view, nothing) is queued after it. The few tensors the
// host itself writes or reads — the used-parameter bitmap, the iteration
// fingerprint, join flags, the traced order, parameter shapes at construction —
// stay CPU tensors on every backend; NCCL stages them through the device and
// their wait() blocks until the host holds the result (Note [NCCL host
// tensors]). Comm hooks run on the bucket's device; PowerSGD's Gram-Schmidt
// copies its small factors to the host and back (comm_hooks/powersgd.cpp).
// Read before: distributed/reducer.h, distributed/bucket_assignment.h.
// Read next: distributed/reducer_join.cpp.
#include <algorithm>

#include "core/grad_mode.h"
#include "core/native/native.h"
#include "distributed/reducer.h"

namespace lockstep::distributed {

void Reducer::initialize_buckets(const std::vector<BucketSpec>& specs) {
  std::vector<Bucket> buckets;
  std::vector<Location> locations(params_.size());
  int64_t elements = 0;
  for (const BucketSpec& spec : specs) {
    Bucket bucket;
    int64_t total = 0;
    for (size_t k = 0; k < spec.param_indices.size(); ++k) {
      size_t i = spec.param_indices[k];
      bucket.param_indices.push_back(i);
      bucket.offsets.push_back(total);
      bucket.lengths.push_back(params_[i].numel());
      locations[i] = {buckets.size(), k};
      total += params_[i].numel();
    }
    // On the parameters' device (Note [DDP on CUDA]).
    bucket.flat = native::empty({total}, spec.dtype, spec.device);  // (total)
    native::fill_(bucket.flat, 0.0);
    buckets.push_back(std::move(bucket));
    elements += total;
  }
  buckets_ = std::move(buckets);
  locations_ = std::move(locations);
  num_elements_ = elements;
  layout_hash_ = detail::bucket_layout_hash(buckets_);
  if (!options_.gradient_as_bucket_view()) return;
  // Existing gradients move into the (new) buckets (Note [Gradients as bucket views]).
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& grad = params_[i].mutable_grad();
    if (!grad.defined()) continue;
    Tensor view = bucket_view(i);
    native::copy_(view, grad);
    grad = view;
  }
}

Tensor Reducer::bucket_view(size_t index) const {
  const Location loc = locations_[index];
  return native::view(buckets_[loc.bucket].slice(loc.slot), params_[index].sizes());  // (param shape)
}

bool Reducer::is_bucket_view(size_t index, const Tensor& grad) const {
  const Location loc = locations_[index];
  const Bucket& b = buckets_[loc.bucket];
  return grad.impl()->storage == b.flat.impl()->storage &&
         grad.storage_offset() == b.flat.storage_offset() + b.offsets[loc.slot] && grad.is_contiguous() &&
         grad.sizes() == params_[index].sizes() && grad.dtype() == b.flat.dtype();
}

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
                                 progress_note(position(buckets_.size(), true))));
    }
  }
  std::vector<size_t> ready_order;
  for (int64_t i : order.to_vector<int64_t>()) {
    if (i < 0 || i >= n) fail(lockstep::detail::str("DDP (rank ", rank, "): rank ", source_rank, "'s traced "
                                                    "gradient order holds parameter index ", i, " but there are ",
                                                    n, " parameters; the ranks wrap different models"));
    ready_order.push_back(static_cast<size_t>(i));
  }
  initialize_buckets(compute_bucket_assignment(params_, ready_order, options_.first_bucket_mb(),
                                               options_.bucket_cap_mb()));
  ready_order_.clear();
  rebuilt_ = true;
  log_bucket_layout("rebuilt from the traced order");
}

}  // namespace lockstep::distributed
