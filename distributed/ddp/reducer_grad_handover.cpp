// distributed/ddp/reducer_grad_handover.cpp — the copy back into .grad made by
// reference where no one can tell the difference (Note [Copy-out by reference]).
//
// § Note [Copy-out by reference]
// Without gradient_as_bucket_view, the paper's reducer copies each averaged
// slice back into its parameter's .grad (copy_out): two passes over every
// gradient, on the compute thread, after backward — ~10% of the communication
// cost of a ResNet50 iteration on one host, where the AllReduce itself is memory
// traffic (docs/results/evaluation.md). .grad stays a tensor of its own, as
// PyTorch's default promises: a user who keeps p.grad() from one iteration sees
// the values of that iteration ever after.
//
// The copy is needed only where someone could see the difference. So copy_out
// hands the slot over instead — .grad becomes a view of the slot, like
// gradient_as_bucket_view's — when .grad is undefined (zero_grad's default
// set_to_none dropped it) or held by its parameter alone (its TensorImpl and its
// storage have no other owner); otherwise it copies as before. From then on the
// slot may be seen from outside only through .grad, until the next synced
// backward writes the bucket again; so before that backward (prepare_for_backward)
// before_backward() counts who holds each bucket's storage: the bucket itself and
// the parameters whose .grad is their slot. Anyone more is a tensor kept outside
// DDP (a saved `p.grad()` after zero_grad, a view of one): the bucket then gets
// fresh memory from the group (empty_buffer), and the old memory lives on, with its
// values, for whoever holds it. A .grad still pointing there is no longer a slot:
// the hooks copy it in and copy_out copies into it, as without this Note.
//
// What .grad then is: between backward and the next synced backward, a view of the
// bucket (as in PyTorch with gradient_as_bucket_view), whose values no later DDP
// write can change while anyone outside holds it. In-place changes to .grad
// (clipping, unscaling, zero_grad(false)) are changes to the slot, which the next
// backward accumulates into and copies nowhere (the view-mode path of copy_in).
// Plug-ins (ZeRO) and comm hooks keep the plain copy: they may keep, free or reuse
// a bucket in ways this count cannot see. LOCKSTEP_DDP_COPY_OUT_BY_REFERENCE=0
// turns it off (for A/B runs).
//
// The copy in, too, is made only once (Note [Gradient sinks], autograd/accumulate_grad.h):
// where copy_out may hand .grad its slot (by reference, or as a bucket view), DDP
// gives every parameter a gradient sink, and in a synced backward the incoming
// gradient goes straight into its slot, scaled and counted in the pass that writes
// it (place) — for a bf16 gradient of a float32 parameter under autocast, the
// conversion to float32 is that same pass, where AccumulateGrad would convert it
// into a tensor of its own and copy_in would read that back. .grad is the slot from
// then on, holding grad / world until the AllReduce (as with bucket views). The sink
// declines — AccumulateGrad and copy_in run as before — outside a synced backward, for
// a parameter already ready, under static_graph (a parameter may get several
// gradients a backward), with a plug-in, and when anyone but DDP has a
// post-accumulate-grad hook on the parameter (it would see the scaled value), and
// with LOCKSTEP_DDP_GRAD_SINKS=0 (for A/B runs).
//
// Read before: distributed/ddp/reducer_buckets.cpp. Read next: distributed/ddp/reducer_launch.h.
#include "autograd/engine.h"
#include "core/env_flag.h"
#include "core/grad_mode.h"
#include "distributed/ddp/nonfinite_check.h"
#include "distributed/ddp/reducer.h"
#include "distributed/ddp/reducer_buckets.h"

namespace lockstep::distributed {

BucketStorage::BucketStorage(std::vector<Tensor> params, bool as_view, ProcessGroup& group)
    : params_(std::move(params)),
      as_view_(as_view),
      by_reference_(!as_view && env_flag("LOCKSTEP_DDP_COPY_OUT_BY_REFERENCE", true)),
      sinks_(env_flag("LOCKSTEP_DDP_GRAD_SINKS", true)),
      placed_(params_.size(), false),
      group_(&group),
      rank_(group.rank()) {}

bool BucketStorage::hand_over(size_t index, Tensor& grad) {
  if (grad.defined() && is_view(index, grad)) return true;  // placed there (Note [Gradient sinks])
  if (grad.defined()) {
    const bool unshared = grad.impl_ptr().use_count() == 1 && grad.impl()->storage.use_count() == 1;
    const Bucket& b = buckets_[locations_[index].bucket];
    const bool alike = grad.dtype() == b.flat.dtype() && grad.device() == b.flat.device() &&
                       grad.sizes() == params_[index].sizes();
    if (!unshared || !alike) return false;  // copied into, as before
  }
  grad = view(index);
  return true;
}

Tensor BucketStorage::place(size_t index, const Tensor& incoming, double scale) {
  if (!sinks_ || !(as_view_ || by_reference_)) return {};
  const Location loc = locations_[index];
  const Bucket& b = buckets_[loc.bucket];
  // The fused kernel's cases only; anything else goes the usual way.
  const bool fits = b.dtype == kFloat32 && b.device.is_cpu() && incoming.device().is_cpu() &&
                    (incoming.dtype() == kFloat32 || incoming.dtype() == kBFloat16) && incoming.is_contiguous() &&
                    incoming.numel() == params_[index].numel();
  if (!fits) return {};
  NoGradGuard no_grad;
  const int64_t bad = detail::copy_scaled_counting_non_finite(b.slice(loc.slot), incoming.reshape({-1}), scale,
                                                              non_finite_ != nullptr);
  if (non_finite_ != nullptr) non_finite_->record(index, bad);
  placed_[index] = true;
  ++gradients_placed_;
  return view(index);  // (param shape)
}

void BucketStorage::before_backward() {
  if (!by_reference_) return;
  for (Bucket& b : buckets_) {
    if (!b.flat.defined()) continue;
    long expected = 1;  // b.flat
    for (size_t i : b.param_indices) {
      const Tensor& grad = params_[i].grad();
      if (grad.defined() && is_view(i, grad)) ++expected;  // each such .grad's TensorImpl holds the storage once
    }
    if (b.flat.impl()->storage.use_count() <= expected) continue;
    b.flat = group_->empty_buffer(b.numel(), b.dtype, b.device);  // (numel); the old one stays with its holders
  }
}

Tensor Reducer::place_gradient(size_t index, const Tensor& incoming) {
  const bool synced = expect_autograd_hooks_ && autograd::in_backward() && !ready_[index];
  if (!synced || plugin_ != nullptr || options_.static_graph()) return {};
  // Anyone else's hook would see grad / world (Note [Gradient sinks]).
  if (autograd::post_accumulate_grad_hook_count(params_[index]) != 1) return {};
  return storage_.place(index, incoming, launcher_.copy_scale(divisor_));
}

}  // namespace lockstep::distributed
