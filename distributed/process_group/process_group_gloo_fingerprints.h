// distributed/process_group/process_group_gloo_fingerprints.h — internal to the Gloo backend:
// the fingerprints of a group's collectives, recorded at issue and compared across
// ranks in batches over Gloo, on the worker thread that first needs a verdict.
//
// § Note [Fingerprints exchanged in batches over Gloo]
// The Gloo group records each collective's fingerprint when it is issued
// (ProcessGroupGloo::enqueue, under its issue mutex) and asks for the verdict on
// the worker thread just before the collective's data moves
// (ProcessGroupGloo::check_before_running). When no exchange has covered that
// collective yet, the asking worker runs one (Note [Batched fingerprints],
// fingerprint_ledger.h): this rank's recorded fingerprints go to every peer and
// each peer's arrive, on a slot of their own (kFingerprintSlotPrefix, the
// exchange's first sequence number as tag), over Gloo's unbound buffers — one
// "send ready", one "receive ready" and one message each way per exchange,
// however many collectives it covers. Workers that need a verdict while an
// exchange runs wait for it, then run the next one if theirs is still not
// covered; one exchange runs at a time, so every rank numbers them alike.
// A failed exchange (a peer gone, the group's timeout) tears the group down
// before its buffers are freed (call_gloo, Note [Gloo buffers after a failure])
// and is rethrown to every later asker.
// Read before: distributed/process_group/fingerprint_ledger.h,
// distributed/process_group/process_group_gloo_pending.h.
// Read next: distributed/process_group/process_group_gloo.cpp (check_before_running).
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

#include <gloo/context.h>

#include "distributed/process_group/fingerprint_ledger.h"

namespace lockstep::distributed::gloo_detail {

constexpr uint8_t kFingerprintSlotPrefix = 0x21;  // beside kPointToPointSlotPrefix (0x20)

class FingerprintChecks {
 public:
  // `context` is the group's GuardedContext.
  explicit FingerprintChecks(std::shared_ptr<gloo::Context> context);

  // Caller's thread, at issue, in sequence order.
  void record(const detail::Fingerprint& f, bool checked);
  // Worker thread, before collective `seq`'s data moves: returns once every rank's
  // fingerprint of it has been compared, exchanging (up to `timeout`) when none
  // has covered it yet. Throws an ls::Error naming both ranks' calls on a
  // mismatch, a gloo::Exception on a transport failure or timeout.
  void check(int64_t seq, std::chrono::milliseconds timeout);

 private:
  void exchange(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds timeout);

  std::shared_ptr<gloo::Context> context_;
  std::mutex mutex_;  // guards everything below
  std::condition_variable exchanged_;
  detail::FingerprintLedger ledger_;
  bool exchanging_ = false;
  std::exception_ptr failure_;  // the exchange that failed: the group is torn down
};

}  // namespace lockstep::distributed::gloo_detail
