// distributed/ddp/reducer_buckets.cpp — the Reducer's bucket storage: building the
// buckets from a BucketSpec list, the copy into them (with the paper's
// division by the world size) and the copy out, or gradients as views into them.
//
// § Note [Gradients as bucket views]
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
// § Note [DDP on CUDA]
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
// copies its small factors to the host and back (../comm_hooks/powersgd.cpp).
//
// Read before: distributed/ddp/reducer_buckets.h, distributed/ddp/bucket_assignment.h.
// Read next: distributed/ddp/reducer_grad_handover.cpp, distributed/ddp/reducer_launch.h.
#include "distributed/ddp/reducer_buckets.h"

#include "core/grad_mode.h"
#include "core/native/native.h"
#include "distributed/ddp/ddp_fingerprint.h"
#include "distributed/ddp/nonfinite_check.h"

namespace lockstep::distributed {

void BucketStorage::build(const std::vector<BucketSpec>& specs) {
  std::vector<Bucket> buckets;
  std::vector<Location> locations(params_.size());
  int64_t elements = 0;
  for (const BucketSpec& spec : specs) {
    Bucket bucket;
    bucket.dtype = spec.dtype;
    bucket.device = spec.device;
    const std::vector<size_t>& order = spec.param_indices;
    int64_t total = 0;
    for (size_t k = 0; k < order.size(); ++k) {
      size_t i = order[k];
      bucket.param_indices.push_back(i);
      bucket.offsets.push_back(total);
      bucket.lengths.push_back(params_[i].numel());
      locations[i] = {buckets.size(), k};
      total += params_[i].numel();
    }
    // On the parameters' device (Note [DDP on CUDA]).
    bucket.flat = group_->empty_buffer(total, spec.dtype, spec.device);  // (total), zeros
    buckets.push_back(std::move(bucket));
    elements += total;
  }
  buckets_ = std::move(buckets);
  locations_ = std::move(locations);
  placed_.assign(params_.size(), false);
  num_elements_ = elements;
  layout_hash_ = detail::bucket_layout_hash(buckets_);
  if (!as_view_) return;
  // Existing gradients move into the (new) buckets (Note [Gradients as bucket views]).
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& grad = params_[i].mutable_grad();
    if (!grad.defined()) continue;
    Tensor slot = view(i);
    native::copy_(slot, grad);
    grad = slot;
  }
}

void BucketStorage::copy_in(size_t index, bool locally_unused, double scale) {
  NoGradGuard no_grad;
  const Location loc = locations_[index];
  Tensor slot = buckets_[loc.bucket].slice(loc.slot);  // (numel)
  if (placed_[index]) {  // place() did it all (Note [Gradient sinks])
    placed_[index] = false;
    return;
  }
  Tensor& grad = params_[index].mutable_grad();
  if (!grad.defined()) {
    native::fill_(slot, 0.0);
    return;
  }
  if ((as_view_ || by_reference_) && is_view(index, grad)) {
    // Already in its slot: nothing to copy (Note [Gradients as bucket views],
    // Note [Copy-out by reference]).
    // A locally unused parameter may end globally unused, and then keeps its
    // .grad as it was: give that value its own storage before scaling the slot.
    if (locally_unused) grad = native::clone(grad);
    if (non_finite_ != nullptr) {
      // The slot holds this rank's own values until scaled: count them in the same pass.
      non_finite_->record(index, detail::copy_scaled_counting_non_finite(slot, slot, scale, true));
    } else if (scale != 1.0) {
      native::binary_scalar_(native::BinaryOp::Mul, slot, scale);
    }
  } else {
    // Copy, divide and count in one pass (the copy-in is on the compute
    // thread, in the gradient's hook; every pass over memory here is one the
    // backward waits for).
    const int64_t bad = detail::copy_scaled_counting_non_finite(slot, grad.reshape({-1}), scale, non_finite_ != nullptr);
    if (non_finite_ != nullptr) non_finite_->record(index, bad);
    // From now on .grad is the slot (the copy above re-established the view
    // that zero_grad(set_to_none) dropped).
    if (as_view_ && !locally_unused) grad = view(index);
  }
}

void BucketStorage::copy_out(size_t bi, const Tensor& result, const std::vector<int64_t>& global_used) {
  NoGradGuard no_grad;
  Bucket& b = buckets_[bi];
  if (result.raw_data() != b.flat.raw_data() || result.dtype() != b.flat.dtype()) {
    LS_CHECK(result.numel() == b.flat.numel(), "DDP (rank ", rank_, "): the communication "
             "hook of bucket ", bi, " returned ", result.numel(), " elements but the bucket holds ",
             b.flat.numel(), "; the hook's future must yield the averaged flat bucket");
    native::copy_(b.flat, result.reshape({-1}));
  }
  b.flat.bump_version();
  for (size_t k = 0; k < b.param_indices.size(); ++k) {
    const size_t i = b.param_indices[k];
    // Globally unused: no rank produced a gradient; leave .grad as it was so
    // optimizers skip the parameter.
    if (!global_used.empty() && global_used[i] == 0) continue;
    Tensor& grad = params_[i].mutable_grad();
    if (as_view_) {
      // Usually already the slot; a parameter used on other ranks only gets it now.
      if (!grad.defined() || !is_view(i, grad)) grad = view(i);
      continue;
    }
    if (by_reference_ && hand_over(i, grad)) continue;  // Note [Copy-out by reference]
    Tensor averaged = b.slice(k).view(params_[i].sizes());
    if (grad.defined()) {
      native::copy_(grad, averaged);
      grad.bump_version();
    } else {
      grad = native::clone(averaged);
    }
  }
}

Tensor BucketStorage::view(size_t index) const {
  const Location loc = locations_[index];
  return native::view(buckets_[loc.bucket].slice(loc.slot), params_[index].sizes());  // (param shape)
}

bool BucketStorage::is_view(size_t index, const Tensor& grad) const {
  const Location loc = locations_[index];
  const Bucket& b = buckets_[loc.bucket];
  return grad.impl()->storage == b.flat.impl()->storage &&
         grad.storage_offset() == b.flat.storage_offset() + b.offsets[loc.slot] && grad.is_contiguous() &&
         grad.sizes() == params_[index].sizes() && grad.dtype() == b.flat.dtype();
}

}  // namespace lockstep::distributed
