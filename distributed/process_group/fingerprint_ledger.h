// distributed/process_group/fingerprint_ledger.h — batched collective checks: which
// collectives' fingerprints the ranks have compared, what the next exchange carries,
// and what each collective's comparison found. No transport: the Gloo backend moves
// its messages over Gloo (process_group_gloo_fingerprints.h), the MPI backend with
// MPI_Iallgather posted ahead of need (process_group_mpi_fingerprints.h); tests drive it
// with plain vectors.
//
// § Note [Batched fingerprints]
// Checking every collective (Note [Collective fingerprints]) with one exchange
// per collective costs one more exchange per call: over Gloo's TCP transport a
// 40-byte message is a rendezvous of its own (a "send ready" and a "receive
// ready" notice, then the bytes, each handled by Gloo's network thread on both
// ranks); over MPI one more blocking MPI_Allgather (the measured cost:
// docs/results/distributed_choices.md). But a caller that issues collectives
// faster than they run (a burst of allreduces, DDP's buckets while earlier ones
// are in flight) has issued the next ones before the first is checked. So:
//   - at issue, each rank records the collective's fingerprint (record), in
//     sequence order;
//   - the first worker that needs the verdict on a collective not yet compared
//     runs one exchange: every rank sends the fingerprints it has recorded from
//     the agreed start, up to kBatch (outgoing);
//   - after it, every rank holds all ranks' fingerprints for [start, start + the
//     fewest any rank sent) — the same range on every rank, so the next
//     exchange's start is agreed without a message — and compares each
//     collective of that range (absorb); a mismatch is kept as that
//     collective's error and thrown when its worker asks (verdict), so the
//     error names the collective that differs, on every rank alike, before
//     its data moves.
// One exchange checks a whole burst; a caller that waits for each collective
// before issuing the next still pays one exchange per call (as before).
// A collective recorded with checked = false (the pieces of a chunked allreduce
// after the first, whose fingerprint names the whole tensor: Note [Large
// allreduce in chunks]) travels in the batch, and is compared only when some
// rank recorded it as checked. Not thread-safe: the backend holds one mutex
// around every call.
// Read before: distributed/process_group/collective_check.h.
// Read next: distributed/process_group/process_group_gloo_fingerprints.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "distributed/process_group/collective_check.h"

namespace lockstep::distributed::detail {

class FingerprintLedger {
 public:
  static constexpr int kBatch = 64;  // fingerprints per exchange at most (one bit each in `checked`)

  // One rank's part of one exchange; travels as raw bytes (the first bytes() of it).
  struct Message {
    int64_t first_seq = 0;  // the agreed start: the first collective not yet compared
    int32_t count = 0;      // entries[0, count) are collectives first_seq, first_seq + 1, ...
    int32_t reserved = 0;
    uint64_t checked = 0;   // bit i: entries[i] was recorded as checked
    Fingerprint entries[kBatch];
    size_t bytes() const { return offsetof(Message, entries) + static_cast<size_t>(count) * sizeof(Fingerprint); }
  };

  // `backend` ("gloo", "mpi") starts the error messages.
  FingerprintLedger(int rank, int size, std::string backend);

  // At issue: the next collective in sequence order (f.seq == recorded_end()).
  void record(const Fingerprint& f, bool checked);
  int64_t recorded_end() const { return recorded_end_; }
  // Whether collective `seq` has been compared (its verdict is known).
  bool covered(int64_t seq) const { return seq < covered_end_; }
  int64_t covered_end() const { return covered_end_; }
  // This rank's part of the next exchange; at least one entry once a collective
  // at or after the agreed start has been recorded.
  Message outgoing() const;
  // all[r]: rank r's part of that exchange. Compares every collective that all
  // ranks sent and keeps the mismatches. Throws ls::Error when the parts do not
  // start at the agreed collective or one is empty (the ranks are out of step).
  void absorb(const std::vector<Message>& all);
  // After covered(seq): throws collective `seq`'s mismatch error, if it had one.
  void verdict(int64_t seq);

 private:
  struct Entry {
    Fingerprint fingerprint;
    bool checked;
  };
  int rank_, size_;
  std::string backend_;
  int64_t recorded_end_ = 0;   // collectives [0, recorded_end_) recorded
  int64_t covered_end_ = 0;    // collectives [0, covered_end_) compared
  std::deque<Entry> pending_;  // recorded, not yet compared: collectives covered_end_, covered_end_ + 1, ...
  std::map<int64_t, std::string> mismatches_;  // compared, differing, verdict not yet asked for
};

}  // namespace lockstep::distributed::detail
