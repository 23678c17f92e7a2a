// distributed/process_group/shm/shm_buffers.h — memory every rank of a shared-memory
// channel can read: the buffers a group's collectives move again and again (DDP's
// buckets), allocated so that an allreduce needs no copy into the channel's slots.
//
// § Note [Shared-memory buffers]
// The slot path (Note [Shared-memory allreduce]) copies each rank's tensor into
// its slot before the peers can read it, and the result out again: with 2 ranks
// 9 half-chunks of memory traffic per chunk. A tensor that already lies in memory
// the peers have mapped needs 4: each rank reduces its share reading the peers'
// tensors where they are, and writes the result into every rank's tensor (its
// own and, through the mapping, the peers'), so no rank copies anything after the
// reduction. For DDP, whose buckets are allocated once and reduced every
// iteration, that is ~55% less traffic for the whole gradient (NCCL's registered
// user buffers and PyTorch's symmetric memory make the same trade on GPUs).
// - ProcessGroup::empty_buffer asks for such memory. Here it is a memfd (an
//   anonymous file, zero-filled, gone when the last process that maps it exits:
//   nothing is left in /dev/shm when a job is killed), mapped by its owner.
// - A peer maps it (read-write) on first use through /proc/<owner pid>/fd/<fd>, and keeps the
//   mapping for later collectives. Whether every rank can open every other's
//   files that way is probed once at the rendezvous (probe_buffers); if not, the
//   group uses the slot path only.
// - An allreduce whose size reaches kShmBufferMinBytes starts with a step in which
//   every rank publishes where its tensor lies (ShmBufferRef: 0 when not in a
//   buffer). Only if all ranks' tensors lie in buffers does the collective run in
//   place (ShmChannel::allreduce_in_buffers); otherwise that step ends as a check
//   and the slot path follows. The rank order of the reduction, and so every bit
//   of the result, is the slot path's.
// - When a buffer is freed (its last tensor gone), its owner appends the id to a
//   ring in its control block; peers drop their mapping of it at their next
//   collective of that size. A rank never frees a buffer during its own
//   collective on it, and the in-place allreduce returns only when every rank has
//   finished reading it.
// Read before: distributed/process_group/shm/shm_channel.h, shm_layout.h.
// Read next: shm_buffers.cpp, shm_channel.cpp (allreduce_in_buffers).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distributed/process_group/shm/shm_layout.h"

namespace lockstep::distributed {
class Store;
}

namespace lockstep::distributed::detail {

// Allreduces smaller than this stay on the slot path without the extra step.
inline constexpr size_t kShmBufferMinBytes = size_t{256} << 10;

class ShmBuffers {
 public:
  // `controls`: the segment's per-rank control blocks (size of them).
  ShmBuffers(int rank, int size, ShmRankControl* controls);
  ~ShmBuffers();  // unmaps the peers' buffers; this rank's stay valid until their owners go
  ShmBuffers(const ShmBuffers&) = delete;
  ShmBuffers& operator=(const ShmBuffers&) = delete;

  // At the rendezvous, on every rank: can each rank map the others' memfds through
  // /proc? True on all ranks or on none; otherwise *why_not says which rank could not.
  static bool probe(Store& store, int rank, int size, std::chrono::milliseconds timeout, std::string* why_not);

  // `bytes` of zero-filled memory the peers can map. It is freed when the last
  // copy of *owner is released. Throws ls::Error if the kernel refuses it.
  void* allocate(size_t bytes, std::shared_ptr<void>* owner);
  // Where [p, p + bytes) lies, as a peer finds it; id 0 when not inside one buffer.
  ShmBufferRef find(const void* p, size_t bytes) const;
  // Rank q's memory at ref (its buffer's start plus ref.offset), mapped for reading
  // and writing on first use. Throws ls::Error naming the rank if it cannot be mapped.
  uint8_t* peer(int q, const ShmBufferRef& ref);

 private:
  struct Registry;  // this rank's live buffers, shared with their owners
  struct Owned;     // one of this rank's buffers (freed with its last tensor)
  struct Mapping;   // a peer's buffer mapped here
  void drop_freed(int q);

  int rank_;
  int size_;
  ShmRankControl* controls_;
  std::shared_ptr<Registry> registry_;
  std::map<std::pair<int, uint64_t>, std::unique_ptr<Mapping>> peers_;  // (rank, id): the shm worker's only
  std::vector<uint64_t> freed_seen_;                                    // per rank: ring entries handled
};

}  // namespace lockstep::distributed::detail
