// distributed/ddp/reducer.cpp — the core of the Reducer, in the order the paper
// describes it (Section 3.2): hooks → pending counts → in-order launch →
// finalize. Which gradients are ready when, how buckets store them, how a
// bucket is reduced and who watches are the seams of reducer.h.
// Read before: distributed/ddp/reducer.h. Read next: distributed/ddp/reducer_readiness.h,
// distributed/ddp/reducer_buckets.h, distributed/ddp/reducer_plugin.h; on README's DDP
// track, distributed/ddp/reducer_launch.cpp.
#include "distributed/ddp/reducer.h"

#include <algorithm>

#include "autograd/engine.h"
#include "core/native/native.h"

namespace lockstep::distributed {

Reducer::Reducer(std::vector<Tensor> params, std::vector<std::string> names,
                 std::shared_ptr<ProcessGroup> process_group, const DDPOptions& options)
    : params_(std::move(params)),
      names_(std::move(names)),
      process_group_(std::move(process_group)),
      options_(options),
      storage_(params_, options.gradient_as_bucket_view(), *process_group_),
      observe_(process_group_, options, names_, params_, storage_),
      non_finite_(detail::non_finite_policy(options.non_finite_gradients()), params_, names_, process_group_->rank()),
      launcher_(process_group_, options, observe_.backwards()),
      readiness_(make_readiness_policy(options, params_, names_, *process_group_)),
      divisor_(static_cast<double>(process_group_->size())),
      ready_(params_.size(), false) {
  // Buckets in reverse registration order (distributed/ddp/bucket_assignment.h).
  build_buckets(compute_bucket_assignment(params_, options.first_bucket_mb(), options.bucket_cap_mb()),
                "at construction");
  if (non_finite_.policy() != NonFinitePolicy::OFF) storage_.count_non_finite_in(&non_finite_);
  // DDP's gradient hook: AccumulateGrad::apply (autograd/accumulate_grad.cpp) runs it once the
  // parameter's .grad holds its final local value (Note [Post-accumulate-grad hooks]).
  for (size_t i = 0; i < params_.size(); ++i) {
    hooks_.push_back(params_[i].register_post_accumulate_grad_hook(
        [this, i](Tensor&) { autograd_hook(i); }));
    // Note [Gradient sinks]: the copy in made by the pass that writes the gradient.
    if (autograd::set_grad_sink(params_[i], [this, i](const Tensor& g) { return place_gradient(i, g); })) {
      sinks_.push_back(i);
    }
  }
}

Reducer::~Reducer() {
  for (auto& h : hooks_) h.remove();
  for (size_t i : sinks_) autograd::clear_grad_sink(params_[i]);
}

void Reducer::register_comm_hook(CommHook hook) {
  if (plugin_) plugin_->check_comm_hook();
  launcher_.register_hook(std::move(hook), started());
  storage_.disable_copy_out_by_reference();  // Note [Copy-out by reference], reducer_grad_handover.cpp
}

void Reducer::begin_synced_forward(bool exchange_fingerprint) {
  or_fail([&] { observe_.forward_started(exchange_fingerprint, /*joined=*/false); });
}

void Reducer::prepare_for_backward(const std::vector<Tensor>& outputs) {
  observe_.forward_finished();
  expect_autograd_hooks_ = true;
  finalize_queued_ = false;
  next_bucket_ = 0;
  next_finalize_ = 0;
  std::fill(ready_.begin(), ready_.end(), false);
  for (Bucket& b : storage_.buckets()) {
    b.pending = b.param_indices.size();
    b.launched = false;
    b.future = TensorFuture();
  }
  storage_.before_backward();  // Note [Copy-out by reference]
  // The parameters that get no gradient here are ready now (Note [Readiness policies],
  // reducer_readiness.h).
  for (size_t i : readiness_->prepare(outputs)) mark_variable_ready(i, /*locally_unused=*/true);
}

void Reducer::autograd_hook(size_t index) {
  readiness_->record_use(index);        // no_sync iterations count for the bitmap too
  if (!expect_autograd_hooks_) return;  // no_sync, or a backward DDP did not arm
  if (autograd::in_backward()) begin_backward();
  bool ready = false;
  or_fail([&] { ready = readiness_->ready_on_hook(index); });
  if (ready) mark_variable_ready(index);
}

void Reducer::begin_backward() {
  if (finalize_queued_) return;
  finalize_queued_ = true;
  autograd::queue_callback([this] { finalize_backward(); });
  // The first gradient of this backward: the fingerprint exchange starts
  // (Note [DDP iteration fingerprint] in ddp_fingerprint.h); bucket 0 waits for it.
  or_fail([&] { observe_.backward_started(detail::DDPPhase::BACKWARD); });
}

void Reducer::mark_variable_ready(size_t index, bool locally_unused) {
  if (ready_[index]) {
    fail(lockstep::detail::str(
        "DDP (rank ", process_group_->rank(), "): parameter '", names_[index], "' received a gradient twice in "
        "one backward. DDP reduces each gradient once per iteration. Most often the module (or this parameter) "
        "was also used outside ddp.forward in this iteration, e.g. net->forward(x) beside ddp.forward(x): run "
        "every forward through ddp.forward. It also happens with a block run twice under activation "
        "checkpointing (autograd/checkpoint.h) or other reentrant backward, or a parameter shared by two graphs "
        "backpropagated separately; if every iteration does the same, pass DDPOptions().static_graph(true): "
        "DDP then counts the readies in the first iteration and reduces after the last one"));
  }
  ready_[index] = true;
  // The order gradients arrive in (Note [Bucket rebuild from the traced order] in reducer_rebuild.cpp).
  if (!locally_unused) record_ready_order(index);
  const bool in_backward = autograd::in_backward();
  const size_t bucket_index = storage_.bucket_of(index);
  observe_.gradient_ready(index, bucket_index, in_backward);
  copy_grad_into_bucket(index, locally_unused);
  // Launches happen in backward only, after the fingerprint was issued: a
  // bucket filled by prepare_for_backward (unused parameters) goes with the
  // first bucket that fills in backward, or at finalize. Without overlap,
  // every launch waits for finalize (the paper's baseline).
  Bucket& bucket = storage_.buckets()[bucket_index];
  if (--bucket.pending == 0 && in_backward && options_.overlap()) launch_ready_buckets();
}

// The paper's averaging: grad / world into the bucket, so that the SUM over
// the ranks is the average. A registered comm hook gets the plain local sums
// and divides itself (Note [Communication hooks] in comm_hook.h).
void Reducer::copy_grad_into_bucket(size_t index, bool locally_unused) {
  const double scale = launcher_.copy_scale(divisor_);
  // A plug-in may fill buckets its own way (Note [Reducer plug-ins] in reducer_plugin.h).
  if (plugin_) plugin_->copy_in(index, locally_unused, scale);
  else storage_.copy_in(index, locally_unused, scale);
}

// See Note [Bucket launch order] in reducer.h. PyTorch calls this step mark_bucket_ready.
void Reducer::launch_ready_buckets() {
  std::vector<Bucket>& buckets = storage_.buckets();
  const size_t first = next_bucket_;
  while (next_bucket_ < buckets.size() && buckets[next_bucket_].pending == 0) {
    if (next_bucket_ == 0) or_fail([&] { observe_.before_first_launch(); });  // no bucket moves before the ranks agree
    const size_t bi = next_bucket_++;
    observe_.bucket_launched(bi);
    buckets[bi].future = launch(bi, buckets[bi].flat);
    buckets[bi].launched = true;
    if (plugin_) plugin_->bucket_launched(bi);  // Note [Reducer plug-ins]
  }
  if (next_bucket_ != first) observe_.buckets_launched(next_bucket_);
}

// Note [Every launch through a comm hook] (reducer_launch.h).
TensorFuture Reducer::launch(size_t bucket_index, Tensor flat) {
  const Bucket& b = storage_.buckets()[bucket_index];
  std::vector<Tensor> params;
  for (size_t i : b.param_indices) params.push_back(params_[i]);
  GradBucket bucket(bucket_index, storage_.buckets().size(), std::move(flat), std::move(params), b.param_indices,
                    b.offsets, divisor_);
  try {
    return launcher_.launch(bucket);
  } catch (const CommHookError& e) {
    fail(e.what());
  }
}

void Reducer::finalize_backward() {
  expect_autograd_hooks_ = false;
  for (const auto& late : readiness_->at_finalize()) mark_variable_ready(late.index, late.locally_unused);
  launch_ready_buckets();  // without overlap, every launch happens here
  or_fail([&] { observe_.before_first_launch(); });  // when bucket 0 never filled, the check still happens
  unfinished_params_.clear();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!ready_[i]) unfinished_params_.push_back(i);
  }
  unfinished_reduction_ = !unfinished_params_.empty();
  if (!unfinished_reduction_) finish_ready_order();  // Note [Bucket rebuild from the traced order]
  // Empty when every parameter counts as used (Note [Readiness policies]).
  const std::vector<int64_t> global_used = readiness_->globally_used(bitmap_wait());
  // Note [Non-finite gradients] in nonfinite_check.h; not with a plug-in whose hook has stepped on
  // the gradients by the end of backward.
  const bool check_non_finite =
      !(plugin_ && plugin_->consumes_gradients()) && non_finite_.policy() != NonFinitePolicy::OFF;
  if (check_non_finite) non_finite_.before_copy_back(!options_.gradient_as_bucket_view() && next_finalize_ == 0);
  finalize_buckets(storage_.buckets().size(), global_used);
  observe_.backward_finished(readiness_->locally_used(), global_used, readiness_->tracks_unused());
  readiness_->backward_finished();
  if (check_non_finite) non_finite_.after_copy_back(observe_.backwards());
}

void Reducer::finalize_buckets(size_t end, const std::vector<int64_t>& global_used) {
  while (next_finalize_ < end) {
    const size_t bi = next_finalize_++;
    if (storage_.buckets()[bi].launched) finalize_bucket(bi, global_used);
  }
}

// The copy-out: the averaged slices into .grad (Note [Gradients as bucket views] in
// reducer_buckets.cpp).
void Reducer::finalize_bucket(size_t bi, const std::vector<int64_t>& global_used) {
  if (plugin_) return plugin_->finalize_bucket(bi, global_used);  // Note [Reducer plug-ins]
  storage_.copy_out(bi, wait_for_bucket(bi), global_used);
}

Tensor Reducer::wait_for_bucket(size_t bi) {
  Bucket& b = storage_.buckets()[bi];
  Tensor result;  // (numel of the bucket)
  wait_or_fail([&] { result = b.future.wait(process_group_->timeout()); }, bi);
  observe_.bucket_reduced(bi);
  b.future = TensorFuture();
  return result;
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
      "gradient for parameter(s) ", detail::quoted_names(names_, unfinished_params_), ", so the buckets "
      "holding them were never reduced. This happens when forward does not use every parameter (or its "
      "output does not reach them). Pass DDPOptions().find_unused_parameters(true) to let DDP "
      "find and skip them, or make sure every parameter contributes to the loss", readiness_->unfinished_hint()));
}

void Reducer::fail(const std::string& message) {
  expect_autograd_hooks_ = false;
  if (failure_.empty()) failure_ = message;
  throw Error(message);
}

void Reducer::wait_or_fail(const std::function<void()>& wait, size_t bucket) {
  try {
    wait();
  } catch (const std::exception& e) {
    const std::vector<Bucket>& buckets = storage_.buckets();
    const std::string what =
        bucket == buckets.size()
            ? std::string("the AllReduce of the used-parameter bitmap (find_unused_parameters)")
            : lockstep::detail::str(launcher_.what_reduces(), bucket, " (", buckets[bucket].flat.numel(), " ",
                                    dtype_name(buckets[bucket].flat.dtype()), " elements: ",
                                    detail::quoted_names(names_, buckets[bucket].param_indices), ")");
    fail(lockstep::detail::str("DDP (rank ", process_group_->rank(), "): backward #", observe_.backwards(),
                               ": ", what, " failed: ", e.what(), ". A peer rank has probably died or "
                               "stopped training (check its output, or lockstep-run's report of which "
                               "rank failed first); if it is only slow, raise LOCKSTEP_TIMEOUT_S.",
                               observe_.where_others_are(bucket == buckets.size() ? 0 : bucket + 1, false)));
  }
}

BitmapWait Reducer::bitmap_wait() {
  return [this](Work& work) { wait_or_fail([&] { work.wait(process_group_->timeout()); }, num_buckets()); };
}

void Reducer::build_buckets(std::vector<BucketSpec> specs, const char* why) {
  if (plugin_) plugin_->arrange(specs);  // Note [Reducer plug-ins]
  storage_.build(specs);
  observe_.layout_changed(why);
}

}  // namespace lockstep::distributed
