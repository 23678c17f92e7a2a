// distributed/ddp/reducer_observers.cpp — Note [Iteration observers] (reducer_observers.h).
// Read before: distributed/ddp/reducer_observers.h.
#include "distributed/ddp/reducer_observers.h"

#include <cstdio>

#include "distributed/ddp/reducer_timeline.h"

namespace lockstep::distributed {

IterationObservers::IterationObservers(std::shared_ptr<ProcessGroup> process_group, const DDPOptions& options,
                                       std::vector<std::string> names, std::vector<Tensor> params,
                                       const BucketStorage& storage)
    : process_group_(std::move(process_group)), names_(std::move(names)), params_(std::move(params)),
      storage_(storage), debug_level_(detail::ddp_debug_level()), fingerprint_(process_group_) {
  timeline::set_rank(process_group_->rank());  // names this rank's trace file (core/timeline.h)
  if (options.progress_store()) {
    progress_ = std::make_unique<detail::ProgressBoard>(options.progress_store(), process_group_->rank(),
                                                        process_group_->size());
  }
}

void IterationObservers::forward_started(bool exchange_fingerprint, bool joined) {
  if (!joined) timeline::open_span("DDP.forward");  // closed in forward_finished (core/timeline.h)
  ++synced_forwards_;
  if (!exchange_fingerprint) return;
  // Wait now: the forward's own collectives must not meet another rank's buckets.
  start_fingerprint(joined ? detail::DDPPhase::JOINED : detail::DDPPhase::FORWARD);
  finish_fingerprint();
}

void IterationObservers::forward_finished() { timeline::close_span("DDP.forward", "forward"); }

void IterationObservers::backward_started(detail::DDPPhase phase) {
  // Tell the other ranks where we are. The exchange travels while the next
  // gradients are computed; bucket 0 waits for it (Note [DDP iteration fingerprint]).
  ++synced_backwards_;
  record_progress(0, false);
  start_fingerprint(phase);
}

void IterationObservers::gradient_ready(size_t index, size_t bucket, bool in_backward) const {
  if (timeline::is_enabled()) timeline_ready(names_[index], index, bucket, synced_backwards_ + (in_backward ? 0 : 1));
}

void IterationObservers::before_first_launch() { finish_fingerprint(); }

void IterationObservers::bucket_launched(size_t bucket) const {
  if (timeline::is_enabled()) timeline_launch(bucket, synced_backwards_);  // reducer_timeline.h
}

void IterationObservers::bucket_reduced(size_t bucket) const {
  timeline::async_end(timeline_key(synced_backwards_, bucket));  // hooks' futures have no Work to poll
}

void IterationObservers::backward_finished(const std::vector<int64_t>& local_used,
                                           const std::vector<int64_t>& global_used, bool tracks) {
  if (debug_level_ == detail::DDPDebugLevel::DETAIL && tracks) {
    const std::string text =
        detail::describe_unused_parameters(local_used, global_used, names_, process_group_->rank(), synced_backwards_);
    std::fputs(text.c_str(), stderr);
    std::fflush(stderr);
  }
  record_progress(storage_.buckets().size(), true);
}

void IterationObservers::layout_changed(const char* when) const {
  const bool all_ranks = debug_level_ == detail::DDPDebugLevel::DETAIL;
  if (debug_level_ == detail::DDPDebugLevel::OFF || (!all_ranks && process_group_->rank() != 0)) return;
  const std::string text =
      detail::describe_bucket_layout(storage_.buckets(), names_, params_, process_group_->rank(), when);
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
}

void IterationObservers::start_fingerprint(detail::DDPPhase phase) {
  fingerprint_.start({phase, synced_forwards_, synced_backwards_, storage_.layout_hash(),
                      static_cast<int64_t>(storage_.buckets().size()), storage_.num_elements()});
}

void IterationObservers::finish_fingerprint() {
  try {
    fingerprint_.finish();
  } catch (const Error& e) {
    // A failed exchange (not a disagreement): who never came? In a forward the
    // others should have finished the last backward; in a backward, started this one.
    const bool in_forward = fingerprint_.phase() == detail::DDPPhase::FORWARD;
    const std::string note = fingerprint_.wait_failed()
                                 ? (in_forward ? where_others_are(storage_.buckets().size(), true)
                                               : where_others_are(0, false))
                                 : "";
    throw Error(note.empty() ? std::string(e.what()) : e.what() + ("." + note));
  }
}

detail::DDPPosition IterationObservers::position(size_t launched, bool finished) const {
  return {synced_backwards_, static_cast<int64_t>(launched), static_cast<int64_t>(storage_.buckets().size()),
          finished};
}

void IterationObservers::record_progress(size_t launched, bool finished) {
  if (progress_) progress_->record(position(launched, finished));
}

std::string IterationObservers::where_others_are(size_t launched, bool finished) const {
  if (!progress_) return "";
  const std::string text = progress_->who_is_behind(position(launched, finished));
  return text.empty() ? "" : " " + text;
}

}  // namespace lockstep::distributed
