// distributed/ddp/reducer_observers.h — what watches a DDP iteration without
// changing its result: the iteration fingerprint, the progress board, the
// timeline and debug logging. The core Reducer reports its steps here.
//
// § Note [Iteration observers]
// The core (distributed/ddp/reducer.cpp) calls, in order:
//   forward_started        a synced forward (or a joined rank's mirror of one):
//                          counted; the fingerprint is exchanged first when
//                          the forward issues collectives (Note [DDP iteration
//                          fingerprint], ddp_fingerprint.h)
//   forward_finished       prepare_for_backward (the timeline's forward span)
//   backward_started       the first hook of a synced backward: counted, the
//                          position published (Note [Progress board],
//                          ddp_progress.h), the fingerprint exchange started
//   gradient_ready         each gradient in its bucket (timeline, reducer_timeline.h)
//   before_first_launch    before bucket 0: waits for the fingerprint and
//                          throws if the ranks disagree
//   bucket_launched / buckets_launched / bucket_reduced   timeline, progress
//   backward_finished      after finalize: DETAIL logging of unused
//                          parameters (Note [DDP debug levels], ddp_debug.h),
//                          the position "finished"
//   layout_changed         buckets built or rebuilt (INFO logging)
// Observers only throw from the fingerprint (forward_started,
// backward_started, before_first_launch); the Reducer makes that error sticky.
// A failed wait asks where_others_are() for the board's note.
// Read before: distributed/ddp/reducer.h, distributed/ddp/ddp_fingerprint.h,
// distributed/ddp/ddp_progress.h, distributed/ddp/ddp_debug.h, distributed/ddp/reducer_timeline.h.
// Read next: distributed/ddp/reducer_observers.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distributed/ddp/ddp_debug.h"
#include "distributed/ddp/ddp_fingerprint.h"
#include "distributed/ddp/ddp_options.h"
#include "distributed/ddp/ddp_progress.h"
#include "distributed/ddp/reducer_buckets.h"

namespace lockstep::distributed {

class IterationObservers {
 public:
  IterationObservers(std::shared_ptr<ProcessGroup> process_group, const DDPOptions& options,
                     std::vector<std::string> names, std::vector<Tensor> params, const BucketStorage& storage);

  void forward_started(bool exchange_fingerprint, bool joined);
  void forward_finished();
  void backward_started(detail::DDPPhase phase);
  void gradient_ready(size_t index, size_t bucket, bool in_backward) const;
  void before_first_launch();
  void bucket_launched(size_t bucket) const;
  void buckets_launched(size_t launched) { record_progress(launched, false); }
  void bucket_reduced(size_t bucket) const;
  // `local_used` empty: the mode does not track unused parameters.
  void backward_finished(const std::vector<int64_t>& local_used, const std::vector<int64_t>& global_used, bool tracks);
  void layout_changed(const char* when) const;

  // " Progress board: ..." naming the ranks not yet where this rank waits
  // (bucket `launched` - 1 launched, or the whole backward if `finished`), or "".
  std::string where_others_are(size_t launched, bool finished) const;
  // Synced backwards so far (names timeline spans and errors).
  const int64_t& backwards() const { return synced_backwards_; }

 private:
  detail::DDPPosition position(size_t launched, bool finished) const;
  void record_progress(size_t launched, bool finished);
  void start_fingerprint(detail::DDPPhase phase);
  void finish_fingerprint();

  std::shared_ptr<ProcessGroup> process_group_;
  std::vector<std::string> names_;
  std::vector<Tensor> params_;
  const BucketStorage& storage_;
  detail::DDPDebugLevel debug_level_ = detail::DDPDebugLevel::OFF;  // LOCKSTEP_DISTRIBUTED_DEBUG
  int64_t synced_forwards_ = 0;
  int64_t synced_backwards_ = 0;
  detail::IterationFingerprint fingerprint_;
  std::unique_ptr<detail::ProgressBoard> progress_;  // with DDPOptions().progress_store
};

}  // namespace lockstep::distributed
