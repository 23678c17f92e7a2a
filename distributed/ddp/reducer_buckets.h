// distributed/ddp/reducer_buckets.h — the Reducer's bucket storage: the buckets'
// flat buffers, where each gradient lives in them, and the two copies the
// paper's reducer makes — grad / world into the bucket when the gradient is
// ready (copy_in, called by Reducer::copy_grad_into_bucket), the averaged
// slice back into .grad after the collective (copy_out, called by
// Reducer::finalize_bucket). With gradient_as_bucket_view the slices ARE the
// .grad, and both copies disappear (Note [Gradients as bucket views] in
// reducer_buckets.cpp); without it the copy back is made by reference where no
// one can tell (Note [Copy-out by reference], reducer_grad_handover.cpp).
// Read before: distributed/ddp/bucket.h, distributed/ddp/reducer.h.
// Read next: distributed/ddp/reducer_buckets.cpp, distributed/ddp/reducer_launch.h.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "distributed/ddp/bucket.h"
#include "distributed/ddp/bucket_assignment.h"
#include "distributed/process_group/process_group.h"

namespace lockstep::distributed {

namespace detail {
class NonFiniteCheck;  // distributed/ddp/nonfinite_check.h
}

class BucketStorage {
 public:
  // Buckets come from group.empty_buffer: memory the group's collectives may move
  // in place (Note [Shared-memory buffers]).
  BucketStorage(std::vector<Tensor> params, bool as_view, ProcessGroup& group);

  // (Re)builds the buckets of `specs` on their parameters' device; with bucket
  // views, existing gradients move into the new buckets.
  void build(const std::vector<BucketSpec>& specs);

  // Parameter `index`'s gradient times `scale` into its slot (undefined: zeros),
  // in one pass that also counts its NaN / Inf elements for `non_finite` when
  // one is set (count_non_finite_in). `locally_unused`: no gradient here this
  // iteration (find_unused_parameters).
  void copy_in(size_t index, bool locally_unused, double scale);
  // Where copy_in reports each copied gradient's non-finite count (Note
  // [Non-finite gradients]); null: not counted.
  void count_non_finite_in(detail::NonFiniteCheck* non_finite) { non_finite_ = non_finite; }
  // Bucket `bucket`'s reduced value `result` (a hook's may live elsewhere) into
  // its flat buffer, then each slice into its parameter's .grad, except the
  // globally unused ones (global_used[i] == 0; empty: all used).
  void copy_out(size_t bucket, const Tensor& result, const std::vector<int64_t>& global_used);
  // Parameter `index`'s slot of its bucket, shaped like the parameter, and
  // whether `grad` is that slot (Note [Gradients as bucket views]).
  Tensor view(size_t index) const;
  bool is_view(size_t index, const Tensor& grad) const;
  bool as_view() const { return as_view_; }

  // Note [Copy-out by reference]: without gradient_as_bucket_view, copy_out points
  // an unshared .grad at its slot instead of copying into it, and before each synced
  // backward before_backward() gives a bucket fresh memory when anything outside DDP
  // still holds a tensor in the old one. Off for plug-ins and comm hooks (they may
  // keep or free buckets) and with LOCKSTEP_DDP_COPY_OUT_BY_REFERENCE=0.
  void disable_copy_out_by_reference() { by_reference_ = false; }
  void before_backward();

  // Note [Gradient sinks] (autograd/accumulate_grad.h), DDP's side in
  // reducer_grad_handover.cpp: parameter `index`'s incoming gradient (.grad undefined)
  // times `scale` straight into its slot, counted as copy_in counts; returns the slot as
  // the new .grad, or undefined where this storage cannot (then nothing happened). The
  // copy_in that follows for `index` has nothing left to do.
  Tensor place(size_t index, const Tensor& incoming, double scale);
  int64_t gradients_placed() const { return gradients_placed_; }  // since construction

  std::vector<Bucket>& buckets() { return buckets_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  size_t bucket_of(size_t index) const { return locations_[index].bucket; }
  int64_t layout_hash() const { return layout_hash_; }    // Note [DDP iteration fingerprint]
  int64_t num_elements() const { return num_elements_; }  // in all buckets

 private:
  std::vector<Tensor> params_;
  bool as_view_;
  bool by_reference_;      // Note [Copy-out by reference]
  bool sinks_;                // Note [Gradient sinks]: LOCKSTEP_DDP_GRAD_SINKS
  std::vector<bool> placed_;  // per parameter: place()d, copy_in pending (Note [Gradient sinks])
  int64_t gradients_placed_ = 0;
  ProcessGroup* group_;  // the Reducer's, which outlives this
  int rank_;             // for errors
  detail::NonFiniteCheck* non_finite_ = nullptr;
  std::vector<Bucket> buckets_;
  struct Location {
    size_t bucket;  // which bucket
    size_t slot;    // which parameter within it
  };
  std::vector<Location> locations_;  // per parameter
  // copy_out's by-reference hand-over of one slot (Note [Copy-out by reference]);
  // false: .grad is shared and must be copied into.
  bool hand_over(size_t index, Tensor& grad);
  int64_t layout_hash_ = 0;
  int64_t num_elements_ = 0;
};

}  // namespace lockstep::distributed
