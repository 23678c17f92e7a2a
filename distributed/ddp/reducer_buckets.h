// distributed/ddp/reducer_buckets.h — the Reducer's bucket storage: the buckets'
// flat buffers, where each gradient lives in them, and the two copies the
// paper's reducer makes — grad / world into the bucket when the gradient is
// ready (copy_in, called by Reducer::copy_grad_into_bucket), the averaged
// slice back into .grad after the collective (copy_out, called by
// Reducer::finalize_bucket). With gradient_as_bucket_view the slices ARE the
// .grad, and both copies disappear (Note [Gradients as bucket views] in
// reducer_buckets.cpp). Under ZeRO-2 a rank keeps only the gradients it owns,
// and the buckets live only during backward (Note [ZeRO-2 buckets]).
// Read before: distributed/ddp/bucket.h, distributed/ddp/reducer.h.
// Read next: distributed/ddp/reducer_buckets.cpp; on README's DDP track, distributed/ddp/reducer_launch.h.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "distributed/ddp/bucket.h"
#include "distributed/ddp/bucket_assignment.h"

namespace lockstep::distributed {

namespace detail {
class NonFiniteCheck;  // distributed/ddp/nonfinite_check.h
}

// A ZeRO-2 owner meaning "every rank": the gradient is AllReduced and kept
// whole everywhere (ZeRO's split parameters, Note [ZeRO split parameters]).
inline constexpr int kEveryRankOwns = -1;

class BucketStorage {
 public:
  BucketStorage(std::vector<Tensor> params, bool as_view, int rank)
      : params_(std::move(params)), as_view_(as_view), rank_(rank) {}

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
  // The same in pieces, every parameter used (Note [Handing a bucket over in
  // pieces], reducer_handover.cpp): prepare_pieces gives every kept parameter a
  // contiguous .grad to fill (its own, a new uninitialized one, or its bucket
  // view) and says false if one is not contiguous (then use copy_out);
  // copy_out_range copies the bucket's elements [from, to), already reduced in
  // place in its flat buffer, into them.
  bool prepare_pieces(size_t bucket);
  void copy_out_range(size_t bucket, int64_t from, int64_t to);

  // ZeRO-2 (Note [ZeRO-2 buckets], reducer_buckets.cpp): gradient i is reduced
  // only to rank owner[i] (kEveryRankOwns: AllReduced, kept by every rank). Rebuilds the current buckets with each bucket's
  // parameters grouped by owner (rank order; later builds do the same), so
  // that every owner's gradients are one contiguous segment of the bucket.
  void shard_by_owner(std::vector<int> owner);
  bool sharded() const { return !owner_.empty(); }
  // Whether this rank keeps gradient i after its reduction (always, unless ZeRO-2 gives it to another rank).
  bool kept(size_t i) const { return !sharded() || owner_[i] == rank_ || owner_[i] == kEveryRankOwns; }
  const std::vector<int>& owners() const { return owner_; }
  // Under ZeRO-2, after the bucket's gradients reached their owners: frees
  // its buffer (copy_in allocates it again in the next backward).
  void release(size_t bucket);

  std::vector<Bucket>& buckets() { return buckets_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  size_t bucket_of(size_t index) const { return locations_[index].bucket; }
  int64_t layout_hash() const { return layout_hash_; }    // Note [DDP iteration fingerprint]
  int64_t num_elements() const { return num_elements_; }  // in all buckets

 private:
  Tensor view(size_t index) const;  // parameter's slice, shaped like it
  bool is_view(size_t index, const Tensor& grad) const;

  std::vector<Tensor> params_;
  bool as_view_;
  int rank_;  // for errors
  detail::NonFiniteCheck* non_finite_ = nullptr;
  std::vector<Bucket> buckets_;
  struct Location {
    size_t bucket;  // which bucket
    size_t slot;    // which parameter within it
  };
  std::vector<Location> locations_;  // per parameter
  std::vector<int> owner_;           // per parameter, under ZeRO-2; empty otherwise
  int64_t layout_hash_ = 0;
  int64_t num_elements_ = 0;
};

}  // namespace lockstep::distributed
