// distributed/zero/zero_overlap.cpp — the shard step of one reduced bucket,
// called from DDP's Reducer (hook_with_zero_step).
//
// § Note [ZeRO overlap with DDP]
// The Reducer calls the hook after finalize_bucket has copied bucket b's
// averaged gradients into .grad (Note [After a bucket is reduced],
// distributed/zero/bucket_handover.h). The hook steps the parameters of b that this rank
// owns (Optimizer::step_subset, Note [Stepping a subset]) and starts, for
// each owner of parameters in b in rank order, the broadcast of those
// parameters (Note [ZeRO pipelined broadcasts]); the reductions of buckets
// b+1, ... are in flight meanwhile.
// Why the result is bitwise plain DDP + the same optimizer:
//  - the gradient each step reads is the same tensor value plain DDP leaves
//    in .grad: the hook runs after the same copy-out, whatever reduced the
//    bucket (AllReduce or any comm hook), with globally unused parameters
//    untouched, so the optimizer skips exactly what plain DDP's skips;
//  - SGD, Adam and AdamW update each parameter from its own gradient and
//    state only, so stepping a bucket's subset, then the next, is the same
//    arithmetic as one step() over all, in any grouping — the bucket layout
//    of the first iteration (before the rebuild) and of later ones give the
//    same updates, so no iteration needs special handling (PyTorch skips the
//    step of the first ones);
//  - nothing after finalize_bucket reads the parameters before step(): no
//    node of the rest of backward reads them (a bucket is reduced only when
//    all its gradients are final, i.e. every node using its parameters has
//    run — Note [Finalizing buckets during backward], bucket_handover.cpp), and the
//    next forward comes after step(), which waits for every broadcast and
//    copies the owners' values in;
//  - every rank calls the hook for the same buckets in the same order, from
//    the compute thread, so the broadcasts pair up; no_sync backwards do not
//    reach finalize, so nothing is stepped during accumulation.
// Handed over in pieces (Note [Handing a bucket over in pieces]), the hook may
// get the bucket before its reduction is done; the owner's optimizer then
// waits for each piece of a gradient before it reads it, so it reads the same
// values — and nothing else changes.
// ZeRO-2 changes only which ranks receive a gradient: the owner's .grad holds
// the same average (Note [ZeRO-2 buckets]), the others' are never read here.
// The learning rate a scheduler set after the previous step() is the one
// used: the step happens in the next backward, as plain DDP's would after it.
// Read before: distributed/zero/zero_overlap.h.
// Read next: docs/ddp.md (section on ZeRO).
#include "distributed/zero/zero_overlap.h"

#include <algorithm>
#include <unordered_map>

namespace lockstep::distributed {

namespace detail {

BucketHandover::BucketReducedHook zero_step_hook(const Reducer& reducer, ZeroRedundancyOptimizerBase& zero) {
  const int rank = zero.process_group().rank();
  const std::string who = lockstep::detail::str("hook_with_zero_step (rank ", rank, ")");
  LS_CHECK(zero.zero_options().overlap_with_ddp(), who, ": the optimizer was built without "
           "ZeroOptions().overlap_with_ddp(true); pass it, or call optimizer.step() after backward without the hook");
  LS_CHECK(zero.process_group().size() == reducer.process_group().size() &&
               rank == reducer.process_group().rank(),
           who, ": the optimizer's group (rank ", rank, " of ", zero.process_group().size(),
           ") is not the DDP module's (rank ", reducer.process_group().rank(), " of ",
           reducer.process_group().size(), ")");
  std::unordered_map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < zero.parameters().size(); ++i) index[zero.parameters()[i].impl()] = i;
  const std::vector<Tensor>& ddp_params = reducer.parameters();
  std::vector<size_t> to_zero(ddp_params.size());
  std::vector<bool> covered(zero.parameters().size(), false);
  for (size_t k = 0; k < ddp_params.size(); ++k) {
    auto it = index.find(ddp_params[k].impl());
    LS_CHECK(it != index.end(), who, ": the DDP module's trainable parameter ", k, " (shape ",
             ddp_params[k].shape_str(), ") is not in the ZeroRedundancyOptimizer, so nothing would step it; "
             "build the optimizer over the same module's parameters()");
    to_zero[k] = it->second;
    covered[it->second] = true;
  }
  for (size_t i = 0; i < covered.size(); ++i) {
    LS_CHECK(covered[i], who, ": the optimizer's parameter ", i, " (shape ", zero.parameters()[i].shape_str(),
             ") is not a trainable parameter of the DDP module (frozen, or of another module), so no bucket "
             "reduction would step it; pass exactly the DDP module's trainable parameters");
  }
  zero.mark_attached(who);
  return [&zero, to_zero = std::move(to_zero)](size_t bucket, const std::vector<size_t>& ddp_indices,
                                               const BucketHandover::GradientWait& wait) {
    std::vector<size_t> params;
    params.reserve(ddp_indices.size());
    for (size_t k : ddp_indices) params.push_back(to_zero[k]);
    // The optimizer's parameter i is the bucket's params[slot] (Note [Handing a bucket over in pieces]).
    const ZeroRedundancyOptimizerBase::GradientWait wait_for = [&](size_t i, int64_t end) {
      const auto slot = static_cast<size_t>(std::find(params.begin(), params.end(), i) - params.begin());
      return wait(slot, end);
    };
    zero.step_reduced_bucket(bucket, params, wait_for);
  };
}

std::vector<int> gradient_owners(const Reducer& reducer, const ZeroRedundancyOptimizerBase& zero) {
  std::unordered_map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < zero.parameters().size(); ++i) index[zero.parameters()[i].impl()] = i;
  std::vector<int> owner;
  for (const Tensor& p : reducer.parameters()) owner.push_back(zero.owner(index.at(p.impl())));  // paired above
  return owner;
}

}  // namespace detail

void ZeroRedundancyOptimizerBase::mark_attached(const std::string& what) {
  LS_CHECK(attached_.empty(), what, ": this ZeroRedundancyOptimizer is already attached to a DDP module");
  attached_ = what;
}

void ZeroRedundancyOptimizerBase::step_reduced_bucket(size_t bucket, const std::vector<size_t>& params,
                                                      const GradientWait& wait) {
  if (reduced_buckets_.size() <= bucket) reduced_buckets_.resize(bucket + 1, false);
  LS_CHECK(!reduced_buckets_[bucket], where(), ": DDP reduced bucket ", bucket, " again with no step() since "
           "the previous backward, so the forward in between ran on parameters whose broadcasts were never "
           "waited for. With overlap_with_ddp call optimizer.step() after every synced backward");
  reduced_buckets_[bucket] = true;
  // The first bucket of a backward: the last step's broadcasts must be done
  // before this rank overwrites its parameters (the forward waited for most).
  if (!reduced_since_step_) finish_broadcasts();
  reduced_since_step_ = true;
  step_and_broadcast(params, wait);  // Note [ZeRO pipelined broadcasts]
  const auto stepped = std::chrono::steady_clock::now();
  last_bucket_reduced_at_ = {};
  for (size_t i : params) last_bucket_reduced_at_ = std::max(last_bucket_reduced_at_, wait(i, params_[i].numel()));
  last_bucket_stepped_at_ = std::max(stepped, last_bucket_reduced_at_);
}

}  // namespace lockstep::distributed
