// distributed/process_group/process_group_gloo_fingerprints.cpp — the Gloo group's batched
// fingerprint exchanges (Note [Fingerprints exchanged in batches over Gloo]).
// Read before: distributed/process_group/process_group_gloo_fingerprints.h.
#include "distributed/process_group/process_group_gloo_fingerprints.h"

#include <vector>

#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "distributed/process_group/process_group_gloo_pending.h"

namespace lockstep::distributed::gloo_detail {

using Message = detail::FingerprintLedger::Message;

FingerprintChecks::FingerprintChecks(std::shared_ptr<gloo::Context> context)
    : context_(std::move(context)), ledger_(context_->rank, context_->size, "gloo") {}

void FingerprintChecks::record(const detail::Fingerprint& f, bool checked) {
  std::lock_guard<std::mutex> lock(mutex_);
  ledger_.record(f, checked);
}

void FingerprintChecks::check(int64_t seq, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!ledger_.covered(seq)) {
    if (failure_) std::rethrow_exception(failure_);
    if (exchanging_) {
      exchanged_.wait(lock);  // the running exchange is bounded by its own timeout
    } else {
      exchange(lock, timeout);
    }
  }
  ledger_.verdict(seq);
}

// Called with `lock` held and no exchange running; returns with it held.
void FingerprintChecks::exchange(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds timeout) {
  const int rank = context_->rank;
  const int size = context_->size;
  std::vector<Message> all(static_cast<size_t>(size));  // (size,) rank r's part at all[r]
  all[rank] = ledger_.outgoing();
  exchanging_ = true;
  lock.unlock();
  const uint64_t slot = gloo::Slot::build(kFingerprintSlotPrefix, static_cast<uint32_t>(all[rank].first_seq & 0x7fffffff));
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;  // declared before call_gloo (Note [Gloo buffers after a failure])
  try {
    call_gloo(*context_, [&] {
      buffer = context_->createUnboundBuffer(all.data(), all.size() * sizeof(Message));
      for (int peer = 0; peer < size; ++peer) {
        if (peer == rank) continue;
        buffer->recv(peer, slot, peer * sizeof(Message), sizeof(Message));  // a part is at most a whole Message
        buffer->send(peer, slot, rank * sizeof(Message), all[rank].bytes());
      }
      for (int k = 1; k < size; ++k) buffer->waitRecv(nullptr, timeout);
      for (int k = 1; k < size; ++k) buffer->waitSend(nullptr, timeout);
    });
  } catch (...) {
    lock.lock();
    failure_ = std::current_exception();
    exchanging_ = false;
    exchanged_.notify_all();
    throw;
  }
  lock.lock();
  exchanging_ = false;
  exchanged_.notify_all();
  try {
    ledger_.absorb(all);
  } catch (...) {
    failure_ = std::current_exception();
    throw;
  }
}

}  // namespace lockstep::distributed::gloo_detail
