// distributed/process_group/process_group_gloo_fingerprints.h — internal to the Gloo backend:
// one collective's fingerprint exchange, posted when the collective is issued and
// waited for on the worker thread just before its data moves.
//
// § Note [Fingerprints posted at issue]
// Checking every collective (Note [Collective fingerprints], collective_check.h)
// must not cost a blocking round trip per call: a 10K-float allreduce takes
// about 0.1 ms here, and an allgather of 40 bytes issued by the worker just
// before it is one more chain of thread wake-ups on both ranks. So the exchange
// starts on the caller's thread, at issue time (ProcessGroupGloo::enqueue):
// this rank's 40-byte fingerprint is sent to every peer and a receive for each
// peer's is posted, on a slot of their own (kFingerprintSlotPrefix, the
// sequence number as tag). Gloo's network thread completes both while the
// collective waits in the queue, or while earlier ones run; the worker then only
// waits for what has usually arrived already, compares (check_fingerprints) and
// runs the collective, or throws on every rank alike. A peer that never issues
// the collective is caught by the group's timeout on the wait, as before.
// Lifetime: Gloo's network thread may write into the receive buffer until the
// exchange completes, so an exchange destroyed before it completed (the
// collective was skipped because the group broke, or this check failed) tears
// the group down first (Note [Gloo buffers after a failure]); a group is
// unusable after either anyway.
// Read before: distributed/process_group/collective_check.h,
// distributed/process_group/process_group_gloo_pending.h.
// Read next: distributed/process_group/process_group_gloo.cpp (check_before_running).
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "distributed/process_group/collective_check.h"

namespace lockstep::distributed::gloo_detail {

constexpr uint8_t kFingerprintSlotPrefix = 0x21;  // beside kPointToPointSlotPrefix (0x20)

class FingerprintExchange {
 public:
  // Caller's thread, at issue: sends `mine` to every peer and posts a receive
  // for each peer's. A failure to post (a torn-down group) is kept and thrown
  // by wait_and_check. `context` is the group's GuardedContext.
  FingerprintExchange(std::shared_ptr<gloo::Context> context, const detail::Fingerprint& mine);
  FingerprintExchange(const FingerprintExchange&) = delete;
  FingerprintExchange& operator=(const FingerprintExchange&) = delete;
  ~FingerprintExchange();  // tears the group down first if the exchange did not complete

  // Worker thread, before the data moves: waits (up to `timeout`) for every
  // peer's fingerprint and for our sends, then compares. Throws a gloo::Exception
  // on a transport failure or timeout, an ls::Error naming both ranks' calls on a
  // mismatch (detail::check_fingerprints).
  void wait_and_check(std::chrono::milliseconds timeout);

 private:
  std::shared_ptr<gloo::Context> context_;
  std::vector<detail::Fingerprint> all_;  // (size,) rank r's fingerprint at all_[r]
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer_;  // over all_
  std::exception_ptr post_error_;
  bool completed_ = false;
};

}  // namespace lockstep::distributed::gloo_detail
