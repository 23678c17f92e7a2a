// distributed/process_group/shm/shm_channel.h — collectives between the ranks of one host
// through a shared-memory segment (the Gloo group's fast path on one machine).
//
// Over TCP loopback every byte is copied into a socket buffer and out again by
// the kernel, on both ranks; ranks that share a host can instead meet in
// memory they all map, and move data at memcpy speed (the two rates measured:
// docs/results/distributed_choices.md). Intel oneCCL, DeepSpeed's CPU backend
// and NCCL within a node do the same. ProcessGroupGloo builds a ShmChannel at
// construction when every rank runs on this host (Note [Shared-memory
// rendezvous], shm_rendezvous.cpp) and runs allreduce, broadcast and allgather
// of CPU tensors through it; every other collective, and every group that spans
// hosts, stays on Gloo.
//
// § Note [Shared-memory allreduce]
// The segment holds, per rank, a control block (progress counters, its pid, a
// fingerprint) and two data slots of slot_bytes each. A tensor is cut into
// chunks of at most slot_bytes; chunk number s of the channel's life (its
// "step", counted on every rank alike) uses slot buffer s % 2 and three
// counters per rank, each set to s when that rank has finished a phase:
//   1. arrived: the rank copied its chunk into its own slot, all but its own
//      share (below), which no other rank reads;
//   2. reduced: once all ranks arrived, rank r reduced its share, the r-th of
//      N equal parts of the chunk, over all ranks' data in rank order
//      (((x0 op x1) op x2) ...; x_r read from its own tensor, the others from
//      their slots), the result built up in its own slot's share (AVG divides
//      there too) and copied into its tensor — the reduce-scatter, so every
//      core reduces 1/N of the data;
//   3. left: once all ranks reduced, the rank copied every other part q from
//      rank q's slot into its tensor — the all-gather — and will not read this
//      buffer again.
// Skipping the own share saves memory traffic: with 2 ranks each rank reads
// and writes 9 half-chunks per chunk instead of 11 (one of the 9 a read of
// the result it has just written, from its cache).
// Before writing buffer s % 2 again at step s + 2 a rank waits until every
// rank has left step s. Two buffers let a fast rank copy in its next chunk
// while a slow one still reads the previous. Each element is reduced once, by
// one rank, in rank order, so every rank gets bitwise the same result, and it
// is the plain left-to-right reduction a reference loop computes (f16 / bf16
// round after every step, as reduce_kernels.h does for Gloo).
// Broadcast and allgather use the same slots and counters without the middle
// phase. A counter store is a release, its load an acquire, so the slot bytes
// written before it are seen by whoever sees the counter.
//
// § Note [Shared-memory waiting]
// A rank waiting for a peer's counter spins for up to 50 us (the peer is
// usually a core away and nearly done; not when there are more ranks than
// cores, where the peer may be waiting for this very core), then sleeps on the counter with a futex
// (the kernel's wait-on-an-address, which works across processes on a shared
// mapping) in slices of 50 ms, so a rank that waits does not take the CPU from
// the backward pass it overlaps. Whoever advances a counter wakes the sleepers.
// Between slices it checks three things, each an error naming the peer: the
// peer's process still exists (not a zombie) — a rank that dies mid-collective
// is reported within ~50 ms, not after the timeout; the peer has not left this
// one wait unanswered for the group's timeout (like Gloo, which times each of
// its waits, so a long collective on a busy machine is no error); no rank has
// aborted the channel. A rank that fails sets the
// segment's abort flag with its reason, so the others stop at once too, and
// the Gloo group then refuses further collectives as after any transport
// failure. Each rank also publishes its collective's fingerprint with its
// chunk, and all ranks compare them at every step (detail::check_fingerprints,
// as the Gloo group's check does): ranks that issued different collectives or
// sizes get the mismatch error instead of mixing their data, and no rank ever
// reads or writes outside the fixed-size slots.
// Read before: distributed/process_group/process_group_gloo.h,
// distributed/process_group/collective_check.h. Read next: shm_segment.h,
// shm_channel.cpp, shm_rendezvous.cpp.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "distributed/process_group/collective_check.h"
#include "distributed/process_group/process_group.h"
#include "distributed/process_group/shm/shm_buffers.h"
#include "distributed/process_group/shm/shm_segment.h"

namespace lockstep::distributed {
class Store;
}

namespace lockstep::distributed::detail {

struct ShmHeader;
struct ShmRankControl;

// A peer died, timed out or aborted: the channel (and its group) is unusable.
class ShmFailure : public Error {
 public:
  using Error::Error;
};

// What connect compares across ranks (Note [Shared-memory rendezvous]): the
// hostname, boot id, /dev/shm device, PID and network namespaces of the caller.
std::string shm_host_identity();

// How long a waiting rank spins before it sleeps (Note [Shared-memory waiting]): 50 us,
// or LOCKSTEP_SHM_SPIN_US (0-10^7; anything else throws ls::Error naming it).
std::chrono::microseconds shm_spin_from_env();

class ShmChannel {
 public:
  // The rendezvous (shm_rendezvous.cpp), called by every rank of the group at
  // construction. Returns null when the ranks are not all on this host (then
  // *why_not is empty), or when they are but the segment could not be set up
  // on some rank (*why_not says why; every rank gets null alike).
  // `buffers`: offer memory the peers read in place (Note [Shared-memory buffers]).
  static std::unique_ptr<ShmChannel> connect(Store& store, int rank, int size, size_t slot_bytes, bool buffers,
                                             std::chrono::milliseconds timeout, std::string* why_not);

  // In place over `numel` elements of `dtype` at `data`. `fingerprint` is the
  // collective's (Note [Shared-memory waiting]). Throws ShmFailure, or ls::Error
  // for a mismatch.
  void allreduce(void* data, int64_t numel, ScalarType dtype, ReduceOp op, const Fingerprint& fingerprint,
                 std::chrono::milliseconds timeout);
  // `bytes` at `data` from `root` to every rank.
  void broadcast(void* data, size_t bytes, int root, const Fingerprint& fingerprint,
                 std::chrono::milliseconds timeout);
  // outputs[q] (bytes each) receives rank q's `input`.
  void allgather(const void* input, const std::vector<void*>& outputs, size_t bytes,
                 const Fingerprint& fingerprint, std::chrono::milliseconds timeout);
  // One step that moves no data: every rank publishes `fingerprint`, waits for
  // all the others' and compares them. It is the barrier, the check of a
  // collective that moves nothing here (an empty tensor), and the check that
  // runs before a collective that goes over TCP while the group has shared
  // memory (reduce, reduce_scatter), so every collective is checked in one place.
  void check(const Fingerprint& fingerprint, std::chrono::milliseconds timeout);

  // Memory the peers read in place (Note [Shared-memory buffers]); null when the
  // ranks cannot map each other's buffers. allocate is safe from any thread.
  ShmBuffers* buffers() const { return buffers_.get(); }

  const std::string& segment_name() const { return segment_.name(); }
  size_t slot_bytes() const { return slot_bytes_; }

  // Bytes of the segment for `size` ranks with `slot_bytes` slots.
  static size_t segment_bytes(int size, size_t slot_bytes);

 private:
  class Step;  // one chunk's waits and flags (shm_channel.cpp)
  ShmChannel(ShmSegment segment, int rank, int size, size_t slot_bytes, bool buffers);
  // The allreduce in place when every rank's tensor lies in a buffer; false
  // (after a step that checked the fingerprints) when some rank's does not.
  bool allreduce_in_buffers(void* data, int64_t numel, ScalarType dtype, ReduceOp op,
                            const Fingerprint& fingerprint, std::chrono::milliseconds timeout);
  ShmRankControl& control(int r) const;
  uint8_t* slot(int r, uint32_t step) const;
  ShmHeader& header() const;

  ShmSegment segment_;
  int rank_;
  int size_;
  size_t slot_bytes_;
  uint32_t step_ = 0;  // chunks moved so far, the same on every rank
  bool spin_;          // spin before sleeping: only if every rank can have a core
  std::chrono::microseconds spin_for_;  // for how long (LOCKSTEP_SHM_SPIN_US)
  std::unique_ptr<ShmBuffers> buffers_;
};

}  // namespace lockstep::distributed::detail
