// distributed/ddp/ddp_fingerprint.h — DDP's always-on per-iteration check that every
// rank is at the same point of training: a few integers all-gathered before the
// first bucket of each synced backward (and before the collectives of a synced
// forward), compared on every rank.
//
// § Note [DDP iteration fingerprint]
// DDP's collectives pair up by position: the k-th collective of every rank meets
// the k-th of every other rank. A rank whose control flow differs — it skipped a
// backward, ran an extra forward, built its buckets differently — shifts its
// sequence, so AllReduces add unrelated buffers (silent divergence) or wait for
// partners that never come (a hang). So every synced iteration starts with a
// fingerprint exchange: each rank all-gathers six int64s
//   [phase, synced forwards so far, synced backwards so far,
//    bucket layout hash, number of buckets, elements in all buckets]
// and every rank compares all of them. On a mismatch each rank throws the same
// ls::Error, naming every rank's position ("rank 1: starting forward #4 after
// backward #2") and the likely cause (a skipped backward, an extra forward,
// different models or bucket options).
//
// Where: (1) in backward, the first gradient hook issues the exchange, and the
// Reducer waits for it just before launching bucket 0 — so a mismatch is found
// before any gradient bucket moves, and nothing is left in flight on any rank;
// (2) in a synced forward that itself issues collectives (buffer broadcast, the
// find_unused_parameters bitmap), DDPCore exchanges and waits first. Both use
// the same tensor shape, so when one rank is in a backward and another already
// in its next forward — the signature of a skipped backward — their
// fingerprints meet each other, never a gradient bucket.
// Ranks that have joined (join(), distributed/ddp/ddp_join.h) send phase JOINED
// and are left out of the comparison.
// What it cannot see: a rank that skips a whole iteration (forward and
// backward) issues the same sequence, one iteration late; that shows up as a
// peer that never arrives at the end (a timeout or a closed connection).
// The counters count synced forwards (those that arm the reducer or broadcast
// buffers) and synced backwards, so no_sync() iterations and no-grad forwards
// without collectives do not disturb them. A mismatch is sticky: the ranks'
// counters never agree again, so the Reducer refuses further iterations with
// the first error.
// Cost: one allgather of 48 bytes per rank per iteration (two with buffers or
// find_unused_parameters), plus waiting for it before bucket 0 — at most one
// small-message round trip (measured: docs/results/distributed_choices.md).
// Read before: distributed/ddp/reducer.h. Read next: distributed/ddp/reducer_observers.h.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "distributed/ddp/bucket.h"
#include "distributed/process_group/process_group.h"

namespace lockstep::distributed::detail {

// JOINED: a rank that has run out of inputs inside join() (distributed/ddp/ddp_join.h)
// and only mirrors the others' collectives; its fingerprint is not compared.
enum class DDPPhase : int64_t { FORWARD = 1, BACKWARD = 2, JOINED = 3 };

// One rank's fingerprint, as it travels (six int64).
struct IterationState {
  DDPPhase phase = DDPPhase::FORWARD;
  int64_t forwards = 0;       // synced forwards, counting the current one
  int64_t backwards = 0;      // synced backwards, counting the current one
  int64_t layout_hash = 0;    // FNV-1a of the bucket layout
  int64_t num_buckets = 0;
  int64_t num_elements = 0;   // in all buckets together

  std::array<int64_t, 6> pack() const;
  static IterationState unpack(const int64_t* v);
  bool operator==(const IterationState& o) const = default;
};
static_assert(sizeof(int64_t) * 6 == 48, "the fingerprint is 48 bytes");

// Hash of which parameters (index, numel) and dtype/device each bucket holds, in order.
int64_t bucket_layout_hash(const std::vector<Bucket>& buckets);

// "" when all states agree; otherwise the error text every rank raises: where
// each rank is (ranks with equal states grouped) and the likely cause.
std::string describe_disagreement(const std::vector<IterationState>& all, int my_rank);

// The exchange itself, reused every iteration. Not thread-safe: the compute thread only.
class IterationFingerprint {
 public:
  explicit IterationFingerprint(std::shared_ptr<ProcessGroup> process_group);
  // Issues the allgather of `mine` (asynchronous). A world of one does nothing.
  void start(const IterationState& mine);
  bool in_flight() const { return work_ != nullptr; }
  // Waits (with the group's timeout) for the exchange started last and throws
  // ls::Error when the ranks disagree or the exchange failed (a dead peer).
  void finish();
  // Whether the last finish() threw because the exchange itself failed (a
  // timeout or a dead peer) rather than because the ranks disagreed.
  bool wait_failed() const { return wait_failed_; }
  DDPPhase phase() const { return mine_.phase; }  // of the exchange started last

 private:
  bool wait_failed_ = false;
  std::shared_ptr<ProcessGroup> process_group_;
  IterationState mine_;
  Tensor packed_;               // (6) int64, this rank's state
  std::vector<Tensor> gathered_;  // world x (6) int64
  std::shared_ptr<Work> work_;
};

}  // namespace lockstep::distributed::detail
