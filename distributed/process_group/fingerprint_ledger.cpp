// distributed/process_group/fingerprint_ledger.cpp — the bookkeeping of batched
// fingerprint exchanges (Note [Batched fingerprints]).
// Read before: distributed/process_group/fingerprint_ledger.h.
#include "distributed/process_group/fingerprint_ledger.h"

#include <algorithm>

#include "core/error.h"

namespace lockstep::distributed::detail {

FingerprintLedger::FingerprintLedger(int rank, int size, std::string backend)
    : rank_(rank), size_(size), backend_(std::move(backend)) {}

void FingerprintLedger::record(const Fingerprint& f, bool checked) {
  LS_CHECK(f.seq == recorded_end_, backend_, " collective checks: collective #", f.seq,
           " recorded out of order (expected #", recorded_end_, "); this is a bug in lockstep");
  pending_.push_back({f, checked});
  ++recorded_end_;
}

FingerprintLedger::Message FingerprintLedger::outgoing() const {
  Message m;
  m.first_seq = covered_end_;
  m.count = static_cast<int32_t>(std::min<size_t>(pending_.size(), kBatch));
  for (int32_t i = 0; i < m.count; ++i) {
    m.entries[i] = pending_[i].fingerprint;
    if (pending_[i].checked) m.checked |= uint64_t{1} << i;
  }
  return m;
}

void FingerprintLedger::absorb(const std::vector<Message>& all) {
  LS_CHECK(static_cast<int>(all.size()) == size_, backend_, " collective checks: ", all.size(),
           " parts for a group of ", size_, " ranks; this is a bug in lockstep");
  int32_t common = kBatch;
  for (int r = 0; r < size_; ++r) {
    LS_CHECK(all[r].first_seq == covered_end_ && all[r].count >= 1 && all[r].count <= kBatch, backend_,
             " collective checks: rank ", r, " compared fingerprints from collective #", all[r].first_seq,
             " (", all[r].count, " of them) while rank ", rank_, " expected them from #", covered_end_,
             "; the ranks are out of step (did some rank set LOCKSTEP_COLLECTIVE_CHECKS differently?)");
    common = std::min(common, all[r].count);
  }
  std::vector<Fingerprint> column(static_cast<size_t>(size_));
  for (int32_t i = 0; i < common; ++i) {
    bool any_checked = false;
    for (int r = 0; r < size_; ++r) {
      column[r] = all[r].entries[i];
      any_checked = any_checked || ((all[r].checked >> i) & 1) != 0;
    }
    if (!any_checked) continue;
    std::string mismatch = fingerprint_mismatch(column.data(), size_, rank_, backend_);
    if (!mismatch.empty()) mismatches_.emplace(covered_end_ + i, std::move(mismatch));
  }
  pending_.erase(pending_.begin(), pending_.begin() + common);
  covered_end_ += common;
}

void FingerprintLedger::verdict(int64_t seq) {
  LS_CHECK(covered(seq), backend_, " collective checks: the verdict on collective #", seq,
           " was asked before it was compared; this is a bug in lockstep");
  auto it = mismatches_.find(seq);
  if (it == mismatches_.end()) return;
  std::string mismatch = std::move(it->second);
  mismatches_.erase(it);
  throw Error(mismatch);
}

}  // namespace lockstep::distributed::detail
