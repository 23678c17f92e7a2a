// distributed/process_group/shm/shm_layout.h — the bytes of a shared-memory segment: a
// header, one control block per rank, then two data slots per rank
// (Note [Shared-memory allreduce], shm_channel.h).
//
//   [ShmHeader, 4 KiB] [ShmRankControl x size] [slot r=0 b=0][r=0 b=1][r=1 b=0] ...
//
// Every field that more than one process touches after the rendezvous is a
// lock-free std::atomic (address-free, so it works in memory mapped by several
// processes); each counter sits on its own cache line, so a rank polling one
// counter does not slow the rank writing the next.
// Read before: distributed/process_group/shm/shm_channel.h.
// Read next: distributed/process_group/shm/shm_channel.cpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "distributed/process_group/collective_check.h"

namespace lockstep::distributed::detail {

inline constexpr uint64_t kShmMagic = 0x6c6f636b73746570ull;  // "lockstep"
inline constexpr uint32_t kShmVersion = 2;
inline constexpr size_t kShmFreedRing = 64;  // Note [Shared-memory buffers]
inline constexpr size_t kShmHeaderBytes = 4096;
inline constexpr size_t kShmCacheLine = 64;

static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared-memory counters must be lock-free");

struct ShmHeader {
  uint64_t magic;       // kShmMagic once rank 0 initialized it
  uint32_t version;     // kShmVersion
  int32_t size;         // ranks
  uint64_t slot_bytes;  // bytes of one data slot
  alignas(kShmCacheLine) std::atomic<uint32_t> sleepers;  // ranks inside a futex wait
  alignas(kShmCacheLine) std::atomic<uint32_t> aborted;   // nonzero once a rank gave up
  int32_t aborted_by;
  char abort_reason[512];
};
static_assert(sizeof(ShmHeader) <= kShmHeaderBytes);

// Where a rank's tensor lies in one of its buffers (Note [Shared-memory buffers]);
// id 0: not in a buffer.
struct ShmBufferRef {
  uint64_t id = 0;      // the buffer, unique per rank for the channel's life
  int32_t fd = -1;      // its memfd in the owner's process
  int32_t pad = 0;
  uint64_t bytes = 0;   // the buffer's size
  uint64_t offset = 0;  // the tensor's first byte in it
};

struct ShmRankControl {
  alignas(kShmCacheLine) std::atomic<uint32_t> arrived;  // step whose chunk is in this rank's slot
  alignas(kShmCacheLine) std::atomic<uint32_t> reduced;  // step whose share this rank reduced
  alignas(kShmCacheLine) std::atomic<uint32_t> left;     // step this rank finished reading
  alignas(kShmCacheLine) int32_t pid;                    // this rank's process, for liveness
  Fingerprint fingerprint[2];                            // the collective of each buffer's chunk
  ShmBufferRef buffer[2];                                // where the step's tensor lies, by parity
  alignas(kShmCacheLine) std::atomic<uint64_t> freed_count;  // buffers this rank has freed
  uint64_t freed_ids[kShmFreedRing];                     // the last kShmFreedRing of them, by count
};

inline size_t shm_round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
inline size_t shm_controls_bytes(int size) {
  return shm_round_up(sizeof(ShmRankControl) * static_cast<size_t>(size), 4096);
}

}  // namespace lockstep::distributed::detail
