// distributed/reducer.cpp — hooks, buckets, in-order launches (AllReduce or
// the communication hook), finalize, and the per-iteration fingerprint check
// (Note [DDP iteration fingerprint] in distributed/ddp_fingerprint.h).
// Read before: distributed/reducer.h, distributed/ddp_fingerprint.h.
// Read next: distributed/reducer_buckets.cpp, distributed/reducer_join.cpp.
#include "distributed/reducer.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <unordered_set>

#include "autograd/engine.h"
#include "autograd/graph_traversal.h"
#include "core/grad_mode.h"
#include "core/native/native.h"
#include "distributed/reducer_timeline.h"
#include "distributed/comm_hooks/deterministic_hook.h"

namespace lockstep::distributed {

Reducer::Reducer(std::vector<Tensor> params, std::vector<std::string> names,
                 std::shared_ptr<ProcessGroup> process_group, const DDPOptions& options)
    : params_(std::move(params)),
      names_(std::move(names)),
      process_group_(std::move(process_group)),
      options_(options),
      divisor_(static_cast<double>(process_group_->size())),
      ready_(params_.size(), false),
      fingerprint_(process_group_),
      local_used_(native::zeros({static_cast<int64_t>(params_.size())}, kInt64)),
      ready_count_(params_.size(), 0),
      last_ready_at_(params_.size(), 0) {
  initialize_buckets(compute_bucket_assignment(params_, options.first_bucket_mb(), options.bucket_cap_mb()));
  debug_level_ = detail::ddp_debug_level();
  log_bucket_layout("at construction");
  timeline::set_rank(process_group_->rank());  // names this rank's trace file (core/timeline.h)
  if (options.progress_store()) {
    progress_ = std::make_unique<detail::ProgressBoard>(options.progress_store(), process_group_->rank(),
                                                        process_group_->size());
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    hooks_.push_back(params_[i].register_post_accumulate_grad_hook(
        [this, i](Tensor&) { autograd_hook(i); }));
  }
}

Reducer::~Reducer() {
  for (auto& h : hooks_) h.remove();
}

void Reducer::register_comm_hook(CommHook hook) {
  const int rank = process_group_->rank();
  LS_CHECK(hook != nullptr, "DDP (rank ", rank, "): register_comm_hook was given an empty hook");
  LS_CHECK(comm_hook_ == nullptr, "DDP (rank ", rank, "): register_comm_hook can be called only once; "
           "a communication hook is already registered");
  LS_CHECK(synced_backwards_ == 0 && !expect_autograd_hooks_, "DDP (rank ", rank, "): register_comm_hook "
           "must be called before the first synced forward/backward (buckets already hold gradients "
           "scaled for the default AllReduce). Register it right after constructing DistributedDataParallel");
  LS_CHECK(!options_.deterministic(), "DDP (rank ", rank, "): register_comm_hook with DDPOptions().deterministic(true): "
           "deterministic mode reduces every bucket itself (Note [Deterministic reduction]); drop the option, or "
           "register comm_hooks::deterministic_allreduce_hook without it");
  comm_hook_ = std::move(hook);
}

void Reducer::begin_synced_forward(bool exchange_fingerprint) {
  timeline::open_span("DDP.forward");  // closed in prepare_for_backward (core/timeline.h)
  ++synced_forwards_;
  if (!exchange_fingerprint) return;
  // Wait now: the forward's own collectives must not meet another rank's buckets.
  start_fingerprint(detail::DDPPhase::FORWARD);
  finish_fingerprint();
}

void Reducer::prepare_for_backward(const std::vector<Tensor>& outputs) {
  timeline::close_span("DDP.forward", "forward");
  expect_autograd_hooks_ = true;
  finalize_queued_ = false;
  next_bucket_ = 0;
  std::fill(ready_.begin(), ready_.end(), false);
  for (Bucket& b : buckets_) {
    b.pending = b.param_indices.size();
    b.launched = false;
    b.future = TensorFuture();
  }
  if (options_.static_graph()) {
    // Note [Static graph]: no traversal. The first synced backward only counts
    // (finalize reduces everything); later ones know which parameters this
    // rank never produces and mark them ready now.
    std::fill(ready_count_.begin(), ready_count_.end(), 0);
    if (!static_counted_) return;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (expected_ready_[i] == 0) mark_variable_ready(i, /*locally_unused=*/true);
    }
    return;
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
  ++bitmap_allreduces_;
  native::fill_(local_used_, 0.0);
  for (size_t i : unused) mark_variable_ready(i, /*locally_unused=*/true);
}

void Reducer::autograd_hook(size_t index) {
  if (options_.find_unused_parameters() || (options_.static_graph() && !static_used_known_)) {
    local_used_.data_ptr<int64_t>()[index] = 1;
  }
  if (!expect_autograd_hooks_) return;  // no_sync, or a backward DDP did not arm
  if (options_.static_graph()) return static_graph_hook(index);
  record_ready_order(index);
  mark_variable_ready(index);
}

void Reducer::mark_variable_ready(size_t index, bool locally_unused) {
  if (ready_[index]) {
    fail(lockstep::detail::str(
        "DDP (rank ", process_group_->rank(), "): parameter '", names_[index], "' received a gradient twice in "
        "one backward. DDP reduces each gradient once per iteration; this happens with activation "
        "checkpointing (autograd/checkpoint.h) of a block used twice, other reentrant backward, or a parameter "
        "shared by two graphs backpropagated separately. If every iteration does the same, pass "
        "DDPOptions().static_graph(true): DDP then counts the readies in the first iteration and reduces "
        "after the last one"));
  }
  ready_[index] = true;
  const bool in_backward = autograd::in_backward();
  if (in_backward) begin_backward();
  if (timeline::is_enabled())
    timeline_ready(names_[index], index, locations_[index].bucket, synced_backwards_ + (in_backward ? 0 : 1));
  copy_grad_into_bucket(index, locally_unused);
  // Launches happen in backward only, after the fingerprint was issued: a
  // bucket filled by prepare_for_backward (unused parameters) goes with the
  // first bucket that fills in backward, or at finalize.
  Bucket& bucket = buckets_[locations_[index].bucket];
  if (--bucket.pending == 0 && in_backward) mark_bucket_ready(locations_[index].bucket);
}

void Reducer::begin_backward() {
  if (!finalize_queued_) {
    finalize_queued_ = true;
    autograd::queue_callback([this] { finalize_backward(); });
    // The first gradient of this backward: tell the other ranks where we are.
    // The exchange travels while the next gradients are computed; bucket 0
    // waits for it (Note [DDP iteration fingerprint]).
    ++synced_backwards_;
    record_progress(0, false);
    start_fingerprint(detail::DDPPhase::BACKWARD);
  }
}

// Note [Static graph]
// DDPOptions().static_graph(true) promises that every synced iteration uses the
// same parameters and the same graph (PyTorch's static_graph). Two things
// follow. (1) Unused parameters need finding once: no traversal after forward
// and no used-parameter bitmap per iteration — the first synced backward
// AllReduces the bitmap, and every later one marks the parameters this rank
// never produced as ready in prepare_for_backward and leaves the globally
// unused ones' .grad alone in finalize. (2) A gradient may become ready more
// than once in one backward: with activation checkpointing (autograd/
// checkpoint.h) a block checkpointed twice accumulates its parameters' .grad in
// two nested backwards (Note [Checkpoint and gradient hooks]). Copying the
// first partial sum into the bucket would reduce a wrong value, so DDP must
// know how many readies to wait for. The first synced backward therefore only
// counts each parameter's hook calls and reduces nothing while backward runs;
// finalize_backward records the counts as the expected ones, AllReduces the
// bitmap, copies every gradient in and launches all buckets (no overlap in
// that one iteration). It also records the order of the LAST readies for the
// bucket rebuild (Note [Bucket rebuild from the traced order]). From the
// second synced backward on, a parameter is marked ready on its expected
// count, so buckets launch during backward as usual. Unlike graph traversal,
// counting sees the parameters hidden inside checkpointed functions. A
// parameter that becomes ready more often than in the first iteration is an
// error (the graph was not static); fewer, the usual unfinished-reduction error
// at the next forward. Under join() a rank that never trained mirrors the
// first iteration's bitmap and learns the used set from it (reducer_join.cpp).
void Reducer::static_graph_hook(size_t index) {
  const int count = ++ready_count_[index];
  last_ready_at_[index] = ++ready_clock_;
  if (!static_counted_) {
    if (autograd::in_backward()) begin_backward();  // queue finalize, start the fingerprint
    return;
  }
  if (count > expected_ready_[index]) {
    fail(lockstep::detail::str("DDP (rank ", process_group_->rank(), "): parameter '", names_[index],
                               "' became ready ", count, " times in this backward but ", expected_ready_[index],
                               " times in the first one; DDPOptions().static_graph(true) requires every "
                               "iteration to use the same parameters the same number of times. Drop "
                               "static_graph (and use find_unused_parameters) for a graph that changes"));
  }
  if (count == expected_ready_[index]) mark_variable_ready(index);
}

void Reducer::finish_static_counting() {
  std::vector<size_t> produced;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_count_[i] > 0) produced.push_back(i);
  }
  std::sort(produced.begin(), produced.end(),
            [&](size_t a, size_t b) { return last_ready_at_[a] < last_ready_at_[b]; });
  for (size_t i : produced) record_ready_order(i);
  if (!static_used_known_) {
    global_used_ = native::clone(local_used_);  // (num params) int64, includes no_sync iterations
    local_used_work_ = process_group_->allreduce(global_used_, ReduceOp::SUM);
    ++bitmap_allreduces_;
  }
  expected_ready_ = ready_count_;
  static_counted_ = true;
  for (size_t i = 0; i < params_.size(); ++i) mark_variable_ready(i, /*locally_unused=*/ready_count_[i] == 0);
}

void Reducer::copy_grad_into_bucket(size_t index, bool locally_unused) {
  NoGradGuard no_grad;
  const Location loc = locations_[index];
  Tensor slot = buckets_[loc.bucket].slice(loc.slot);  // (numel)
  Tensor& grad = params_[index].mutable_grad();
  // The paper's averaging: scale by 1 / world before the SUM AllReduce. A
  // communication hook gets the plain local sums (Note [Communication hooks]).
  const double scale = comm_hook_ ? 1.0 : 1.0 / divisor_;
  if (!grad.defined()) {
    native::fill_(slot, 0.0);
    return;
  }
  const bool as_view = options_.gradient_as_bucket_view();
  if (as_view && is_bucket_view(index, grad)) {
    // Already in its slot: nothing to copy (Note [Gradients as bucket views]).
    // A locally unused parameter may end globally unused, and then keeps its
    // .grad as it was: give that value its own storage before scaling the slot.
    if (locally_unused) grad = native::clone(grad);
  } else {
    native::copy_(slot, grad.reshape({-1}));
    // From now on .grad is the slot (the copy above re-established the view
    // that zero_grad(set_to_none) dropped).
    if (as_view && !locally_unused) grad = bucket_view(index);
  }
  if (scale != 1.0) native::binary_scalar_(native::BinaryOp::Mul, slot, scale);
}

void Reducer::mark_bucket_ready(size_t bucket_index) {
  (void)bucket_index;  // launches go by index order, not by which bucket filled
  if (options_.overlap()) launch_ready_buckets();
}

// See Note [Bucket launch order].
void Reducer::launch_ready_buckets() {
  const size_t first = next_bucket_;
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    if (next_bucket_ == 0) finish_fingerprint();  // no bucket moves before the ranks agree
    const size_t bi = next_bucket_++;
    if (timeline::is_enabled()) timeline_launch(bi, synced_backwards_);  // distributed/reducer_timeline.h
    buckets_[bi].future = launch(bi, buckets_[bi].flat);
    buckets_[bi].launched = true;
  }
  if (next_bucket_ != first) record_progress(next_bucket_, false);
}

// The default AllReduce, or the hook (Note [Communication hooks]), on `flat`:
// the bucket's buffer, or zeros of its size when shadowing (reducer_join.cpp).
TensorFuture Reducer::launch(size_t bucket_index, Tensor flat) {
  if (!comm_hook_) {
    // Note [Deterministic reduction]: the ranks' scaled buckets added in rank order.
    if (options_.deterministic()) return comm_hooks::rank_ordered_sum(*process_group_, flat);
    auto work = process_group_->allreduce(flat, ReduceOp::SUM);
    timeline::async_end_when(timeline_key(synced_backwards_, bucket_index),
                             [work] { return work->is_completed(); });
    return TensorFuture::from_work(std::move(work), flat);
  }
  const Bucket& b = buckets_[bucket_index];
  std::vector<Tensor> params;
  for (size_t i : b.param_indices) params.push_back(params_[i]);
  GradBucket grad_bucket(bucket_index, buckets_.size(), flat, std::move(params), b.param_indices, b.offsets,
                         divisor_);
  TensorFuture future;
  try {
    future = comm_hook_(grad_bucket);
  } catch (const std::exception& e) {
    fail(lockstep::detail::str("DDP (rank ", process_group_->rank(), "): the communication hook failed on bucket ",
                               bucket_index, ": ", e.what()));
  }
  if (!future.valid()) {
    fail(lockstep::detail::str("DDP (rank ", process_group_->rank(), "): the communication hook returned an "
                               "empty TensorFuture for bucket ", bucket_index, "; return TensorFuture::ready(t) "
                               "or TensorFuture::from_work(work, t)"));
  }
  return future;
}

std::vector<size_t> Reducer::unready_parameters() const {
  std::vector<size_t> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!ready_[i]) out.push_back(i);
  }
  return out;
}

void Reducer::log_bucket_layout(const char* when) const {
  const bool all_ranks = debug_level_ == detail::DDPDebugLevel::DETAIL;
  if (debug_level_ == detail::DDPDebugLevel::OFF || (!all_ranks && process_group_->rank() != 0)) return;
  const std::string text = detail::describe_bucket_layout(buckets_, names_, params_, process_group_->rank(), when);
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
}

void Reducer::log_unused_parameters(const std::vector<int64_t>& global_used) const {
  if (debug_level_ != detail::DDPDebugLevel::DETAIL) return;
  if (!options_.find_unused_parameters() && !options_.static_graph()) return;
  std::vector<size_t> local_unused, global_unused;
  const auto used = local_used_.to_vector<int64_t>();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (used[i] == 0) local_unused.push_back(i);
    if (i < global_used.size() && global_used[i] == 0) global_unused.push_back(i);
  }
  std::fprintf(stderr, "DDP (rank %d): backward #%lld: %zu parameter(s) got no gradient on this rank%s%s; "
               "%zu unused on every rank%s%s\n", process_group_->rank(), static_cast<long long>(synced_backwards_),
               local_unused.size(), local_unused.empty() ? "" : ": ", names_of(local_unused).c_str(),
               global_unused.size(), global_unused.empty() ? "" : ": ", names_of(global_unused).c_str());
  std::fflush(stderr);
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
    // A failed exchange (not a disagreement): who never came? In a forward the
    // others should have finished the last backward; in a backward, started this one.
    const bool in_forward = fingerprint_.phase() == detail::DDPPhase::FORWARD;
    const std::string note =
        fingerprint_.wait_failed() ? progress_note(in_forward ? position(buckets_.size(), true) : position(0, false))
                                   : "";
    fail(note.empty() ? std::string(e.what()) : e.what() + ("." + note));
  }
}

detail::DDPPosition Reducer::position(size_t launched, bool finished) const {
  return {synced_backwards_, static_cast<int64_t>(launched), static_cast<int64_t>(buckets_.size()), finished};
}

void Reducer::record_progress(size_t launched, bool finished) {
  if (progress_) progress_->record(position(launched, finished));
}

std::string Reducer::progress_note(const detail::DDPPosition& waiting_at) const {
  if (!progress_) return "";
  const std::string text = progress_->who_is_behind(waiting_at);
  return text.empty() ? "" : " " + text;
}

void Reducer::fail(const std::string& message) {
  expect_autograd_hooks_ = false;
  if (failure_.empty()) failure_ = message;
  throw Error(message);
}

// A failed wait (a dead or hung peer, a failing hook) names the backward and
// the bucket (bucket == buckets_.size(): the bitmap).
void Reducer::wait_or_fail(const std::function<void()>& wait, size_t bucket) {
  try {
    wait();
  } catch (const std::exception& e) {
    const std::string what =
        bucket == buckets_.size()
            ? std::string("the AllReduce of the used-parameter bitmap (find_unused_parameters)")
            : lockstep::detail::str(comm_hook_ ? "the communication hook of bucket " : "the AllReduce of bucket ",
                                    bucket, " (", buckets_[bucket].flat.numel(), " ",
                                    dtype_name(buckets_[bucket].flat.dtype()), " elements: ",
                                    names_of(buckets_[bucket].param_indices), ")");
    fail(lockstep::detail::str("DDP (rank ", process_group_->rank(), "): backward #", synced_backwards_,
                               ": ", what, " failed: ", e.what(), ". A peer rank has probably died or "
                               "stopped training (check its output, or lockstep-run's report of which "
                               "rank failed first); if it is only slow, raise LOCKSTEP_TIMEOUT_S.",
                               progress_note(position(bucket == buckets_.size() ? 0 : bucket + 1, false))));
  }
}

void Reducer::finalize_backward() {
  expect_autograd_hooks_ = false;
  if (options_.static_graph() && !static_counted_) finish_static_counting();  // Note [Static graph]
  launch_ready_buckets();  // without overlap, every launch happens here
  finish_fingerprint();    // when bucket 0 never filled, the check still happens
  unfinished_params_ = unready_parameters();
  unfinished_reduction_ = !unfinished_params_.empty();
  if (!unfinished_reduction_) finish_ready_order();  // Note [Bucket rebuild from the traced order]

  std::vector<int64_t> global_used;
  if (local_used_work_) {
    auto work = std::move(local_used_work_);
    local_used_work_.reset();
    wait_or_fail([&] { work->wait(process_group_->timeout()); }, buckets_.size());
    global_used = global_used_.to_vector<int64_t>();
  }
  if (options_.static_graph()) {
    // Note [Static graph]: the first bitmap decides for every later iteration.
    if (!static_used_known_) static_global_used_ = global_used;
    static_used_known_ = true;
    global_used = static_global_used_;
  }
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    if (buckets_[bi].launched) finalize_bucket(bi, global_used);
  }
  // This backward's hooks marked parameters the bitmap already counted: the
  // next bitmap counts from the next forward (and its no_sync iterations) only.
  log_unused_parameters(global_used);
  if (options_.find_unused_parameters() || options_.static_graph()) native::fill_(local_used_, 0.0);
  record_progress(buckets_.size(), true);
}

void Reducer::finalize_bucket(size_t bi, const std::vector<int64_t>& global_used) {
  Bucket& b = buckets_[bi];
  Tensor result;
  wait_or_fail([&] { result = b.future.wait(process_group_->timeout()); }, bi);
  timeline::async_end(timeline_key(synced_backwards_, bi));  // hooks' futures have no Work to poll
  b.future = TensorFuture();
  NoGradGuard no_grad;
  if (result.raw_data() != b.flat.raw_data() || result.dtype() != b.flat.dtype()) {
    LS_CHECK(result.numel() == b.flat.numel(), "DDP (rank ", process_group_->rank(), "): the communication "
             "hook of bucket ", bi, " returned ", result.numel(), " elements but the bucket holds ",
             b.flat.numel(), "; the hook's future must yield the averaged flat bucket");
    native::copy_(b.flat, result.reshape({-1}));
  }
  b.flat.impl()->storage->bump_version();
  const bool as_view = options_.gradient_as_bucket_view();
  for (size_t k = 0; k < b.param_indices.size(); ++k) {
    const size_t i = b.param_indices[k];
    // Globally unused: no rank produced a gradient; leave .grad as it was so
    // optimizers skip the parameter.
    if (!global_used.empty() && global_used[i] == 0) continue;
    Tensor& grad = params_[i].mutable_grad();
    if (as_view) {
      // Usually already the slot; a parameter used on other ranks only gets it now.
      if (!grad.defined() || !is_bucket_view(i, grad)) grad = bucket_view(i);
      continue;
    }
    Tensor averaged = b.slice(k).view(params_[i].sizes());
    if (grad.defined()) {
      native::copy_(grad, averaged);
      grad.impl()->storage->bump_version();
    } else {
      grad = native::clone(averaged);
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
      "find and skip them, or make sure every parameter contributes to the loss",
      options_.static_graph() ? ". With static_graph(true), every iteration must produce the gradients "
                                "the first one did, as many times (Note [Static graph])" : ""));
}

}  // namespace lockstep::distributed
