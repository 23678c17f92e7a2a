// distributed/process_group/process_group_gloo_fingerprints.cpp — the fingerprint exchange
// posted at issue (Note [Fingerprints posted at issue]).
// Read before: distributed/process_group/process_group_gloo_fingerprints.h.
#include "distributed/process_group/process_group_gloo_fingerprints.h"

#include <gloo/types.h>

#include "distributed/process_group/process_group_gloo_pending.h"

namespace lockstep::distributed::gloo_detail {

FingerprintExchange::FingerprintExchange(std::shared_ptr<gloo::Context> context, const detail::Fingerprint& mine)
    : context_(std::move(context)), all_(static_cast<size_t>(context_->size)) {
  const int rank = context_->rank;
  const size_t bytes = sizeof(detail::Fingerprint);
  all_[rank] = mine;
  const uint64_t slot = gloo::Slot::build(kFingerprintSlotPrefix, static_cast<uint32_t>(mine.seq));
  try {
    buffer_ = context_->createUnboundBuffer(all_.data(), all_.size() * bytes);
    for (int peer = 0; peer < context_->size; ++peer) {
      if (peer == rank) continue;
      buffer_->recv(peer, slot, peer * bytes, bytes);
      buffer_->send(peer, slot, rank * bytes, bytes);
    }
  } catch (const std::exception&) {
    post_error_ = std::current_exception();
  }
}

FingerprintExchange::~FingerprintExchange() {
  // Gloo's network thread may still write into all_ (Note [Gloo buffers after a failure]).
  if (!completed_) static_cast<GuardedContext&>(*context_).tear_down();
}

void FingerprintExchange::wait_and_check(std::chrono::milliseconds timeout) {
  if (post_error_) std::rethrow_exception(post_error_);
  call_gloo(*context_, [&] {
    for (int k = 1; k < context_->size; ++k) buffer_->waitRecv(nullptr, timeout);
    for (int k = 1; k < context_->size; ++k) buffer_->waitSend(nullptr, timeout);
  });
  completed_ = true;
  detail::check_fingerprints(all_.data(), context_->size, context_->rank, "gloo");
}

}  // namespace lockstep::distributed::gloo_detail
