// distributed/reducer.cpp — hooks, buckets, in-order launches, finalize, and
// the per-iteration fingerprint check (Note [DDP iteration fingerprint] in
// distributed/ddp_fingerprint.h).
// Read before: distributed/reducer.h, distributed/ddp_fingerprint.h.
#include "distributed/reducer.h"

#include <sstream>
#include <unordered_set>

#include "autograd/engine.h"
#include "autograd/graph_traversal.h"
#include "core/grad_mode.h"
#include "core/native/native.h"
#include "distributed/bucket_assignment.h"

namespace lockstep::distributed {

Reducer::Reducer(std::vector<Tensor> params, std::vector<std::string> names,
                 std::shared_ptr<ProcessGroup> process_group, const DDPOptions& options)
    : params_(std::move(params)),
      names_(std::move(names)),
      process_group_(std::move(process_group)),
      options_(options),
      locations_(params_.size()),
      ready_(params_.size(), false),
      fingerprint_(process_group_),
      local_used_(native::zeros({static_cast<int64_t>(params_.size())}, kInt64)) {
  for (const BucketSpec& spec : compute_bucket_assignment(params_, options.first_bucket_mb(),
                                                          options.bucket_cap_mb())) {
    Bucket bucket;
    int64_t total = 0;
    for (size_t k = 0; k < spec.param_indices.size(); ++k) {
      size_t i = spec.param_indices[k];
      bucket.param_indices.push_back(i);
      bucket.offsets.push_back(total);
      bucket.lengths.push_back(params_[i].numel());
      locations_[i] = {buckets_.size(), k};
      total += params_[i].numel();
    }
    bucket.flat = native::zeros({total}, spec.dtype);
    buckets_.push_back(std::move(bucket));
    num_elements_ += total;
  }
  layout_hash_ = detail::bucket_layout_hash(buckets_);
  for (size_t i = 0; i < params_.size(); ++i) {
    hooks_.push_back(params_[i].register_post_accumulate_grad_hook(
        [this, i](Tensor&) { autograd_hook(i); }));
  }
}

Reducer::~Reducer() {
  for (auto& h : hooks_) h.remove();
}

void Reducer::begin_synced_forward(bool exchange_fingerprint) {
  ++synced_forwards_;
  if (!exchange_fingerprint) return;
  // Wait now: the forward's own collectives must not meet another rank's buckets.
  start_fingerprint(detail::DDPPhase::FORWARD);
  finish_fingerprint();
}

void Reducer::prepare_for_backward(const std::vector<Tensor>& outputs) {
  expect_autograd_hooks_ = true;
  finalize_queued_ = false;
  next_bucket_ = 0;
  std::fill(ready_.begin(), ready_.end(), false);
  for (Bucket& b : buckets_) {
    b.pending = b.param_indices.size();
    b.launched = false;
    b.work.reset();
  }
  if (!options_.find_unused_parameters()) return;

  // Parameters the graph cannot reach get no gradient this iteration: they are
  // ready now. The bitmap of parameters used locally (here or in the no_sync
  // iterations before) is summed across ranks while backward runs.
  std::unordered_set<const TensorImpl*> reached;
  for (const auto& acc : autograd::reachable_accumulators(outputs)) reached.insert(acc->variable().impl());
  int64_t* used = local_used_.data_ptr<int64_t>();
  std::vector<size_t> unused;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (reached.count(params_[i].impl())) {
      used[i] = 1;
    } else {
      unused.push_back(i);
    }
  }
  // Reduce a copy: the original keeps accumulating from hooks while it travels.
  global_used_ = native::clone(local_used_);  // (num params) int64
  local_used_work_ = process_group_->allreduce(global_used_, ReduceOp::SUM);
  native::fill_(local_used_, 0.0);
  for (size_t i : unused) mark_variable_ready(i);
}

void Reducer::autograd_hook(size_t index) {
  if (options_.find_unused_parameters()) local_used_.data_ptr<int64_t>()[index] = 1;
  if (!expect_autograd_hooks_) return;  // no_sync, or a backward DDP did not arm
  mark_variable_ready(index);
}

void Reducer::mark_variable_ready(size_t index) {
  LS_CHECK(!ready_[index], "DDP (rank ", process_group_->rank(), "): parameter '", names_[index],
           "' received a gradient twice in one backward. DDP reduces each gradient once per "
           "iteration; this happens with reentrant backward or a parameter shared by two "
           "graphs backpropagated separately");
  ready_[index] = true;
  const bool in_backward = autograd::in_backward();
  if (!finalize_queued_ && in_backward) {
    finalize_queued_ = true;
    autograd::queue_callback([this] { finalize_backward(); });
    // The first gradient of this backward: tell the other ranks where we are.
    // The exchange travels while the next gradients are computed; bucket 0
    // waits for it (Note [DDP iteration fingerprint]).
    ++synced_backwards_;
    start_fingerprint(detail::DDPPhase::BACKWARD);
  }
  const Location loc = locations_[index];
  Bucket& bucket = buckets_[loc.bucket];
  {
    NoGradGuard no_grad;
    Tensor slot = bucket.slice(loc.slot);  // (numel)
    const Tensor& grad = params_[index].grad();
    if (grad.defined()) {
      // The paper's averaging: scale by 1 / world before the SUM AllReduce.
      native::copy_(slot, grad.reshape({-1}));
      native::binary_scalar_(native::BinaryOp::Mul, slot, 1.0 / process_group_->size());
    } else {
      native::fill_(slot, 0.0);
    }
  }
  // Launches happen in backward only, after the fingerprint was issued: a
  // bucket filled by prepare_for_backward (unused parameters) goes with the
  // first bucket that fills in backward, or at finalize.
  if (--bucket.pending == 0 && in_backward) mark_bucket_ready(loc.bucket);
}

void Reducer::mark_bucket_ready(size_t bucket_index) {
  (void)bucket_index;  // launches go by index order, not by which bucket filled
  if (options_.overlap()) launch_ready_buckets();
}

// See Note [Bucket launch order].
void Reducer::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    if (next_bucket_ == 0) finish_fingerprint();  // no bucket moves before the ranks agree
    Bucket& b = buckets_[next_bucket_++];
    b.work = process_group_->allreduce(b.flat, ReduceOp::SUM);
    b.launched = true;
  }
}

std::vector<size_t> Reducer::unready_parameters() const {
  std::vector<size_t> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!ready_[i]) out.push_back(i);
  }
  return out;
}

std::string Reducer::names_of(const std::vector<size_t>& indices) const {
  std::ostringstream os;
  for (size_t k = 0; k < indices.size() && k < 20; ++k) os << (k ? ", " : "") << '\'' << names_[indices[k]] << '\'';
  if (indices.size() > 20) os << ", ... (" << indices.size() << " in all)";
  return os.str();
}

void Reducer::start_fingerprint(detail::DDPPhase phase) {
  try {
    fingerprint_.start({phase, synced_forwards_, synced_backwards_, layout_hash_,
                        static_cast<int64_t>(buckets_.size()), num_elements_});
  } catch (const Error& e) {
    fail(e.what());
  }
}

void Reducer::finish_fingerprint() {
  try {
    fingerprint_.finish();
  } catch (const Error& e) {
    fail(e.what());
  }
}

void Reducer::fail(const std::string& message) {
  expect_autograd_hooks_ = false;
  if (failure_.empty()) failure_ = message;
  throw Error(message);
}

void Reducer::finalize_backward() {
  expect_autograd_hooks_ = false;
  launch_ready_buckets();  // without overlap, every launch happens here
  finish_fingerprint();    // when bucket 0 never filled, the check still happens
  unfinished_params_ = unready_parameters();
  unfinished_reduction_ = !unfinished_params_.empty();

  // A failed wait (a dead or hung peer) names the backward and the bucket
  // (bucket == buckets_.size(): the bitmap).
  auto wait = [&](Work& work, size_t bucket) {
    try {
      work.wait(process_group_->timeout());
    } catch (const std::exception& e) {
      const std::string what =
          bucket == buckets_.size()
              ? std::string("the AllReduce of the used-parameter bitmap (find_unused_parameters)")
              : lockstep::detail::str("the AllReduce of bucket ", bucket, " (", buckets_[bucket].flat.numel(), " ",
                                      dtype_name(buckets_[bucket].flat.dtype()), " elements: ",
                                      names_of(buckets_[bucket].param_indices), ")");
      fail(lockstep::detail::str("DDP (rank ", process_group_->rank(), "): backward #", synced_backwards_,
                                 ": ", what, " failed: ", e.what(), ". A peer rank has probably died or "
                                 "stopped training (check its output, or lockstep-run's report of which "
                                 "rank failed first); if it is only slow, raise LOCKSTEP_TIMEOUT_S"));
    }
  };
  std::vector<int64_t> global_used;
  if (local_used_work_) {
    auto work = std::move(local_used_work_);
    local_used_work_.reset();
    wait(*work, buckets_.size());
    global_used = global_used_.to_vector<int64_t>();
  }
  NoGradGuard no_grad;
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    Bucket& b = buckets_[bi];
    if (!b.launched) continue;
    wait(*b.work, bi);
    for (size_t k = 0; k < b.param_indices.size(); ++k) {
      size_t i = b.param_indices[k];
      // Globally unused: no rank produced a gradient; leave .grad as it was so
      // optimizers skip the parameter.
      if (!global_used.empty() && global_used[i] == 0) continue;
      Tensor averaged = b.slice(k).view(params_[i].sizes());
      Tensor& grad = params_[i].mutable_grad();
      if (grad.defined()) {
        native::copy_(grad, averaged);
        grad.impl()->storage->bump_version();
      } else {
        grad = native::clone(averaged);
      }
    }
  }
}

void Reducer::check_previous_reduction_finished() {
  if (!failure_.empty()) {
    throw Error(lockstep::detail::str("DDP (rank ", process_group_->rank(), "): this DistributedDataParallel "
                                      "cannot continue after an earlier error: ", failure_));
  }
  if (!unfinished_reduction_) return;
  unfinished_reduction_ = false;
  throw Error(lockstep::detail::str(
      "DDP (rank ", process_group_->rank(), "): the previous iteration's backward produced no "
      "gradient for parameter(s) ", names_of(unfinished_params_), ", so the buckets holding them "
      "were never reduced. This happens when forward does not use every parameter (or its "
      "output does not reach them). Pass DDPOptions().find_unused_parameters(true) to let DDP "
      "find and skip them, or make sure every parameter contributes to the loss"));
}

}  // namespace lockstep::distributed
