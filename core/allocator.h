// core/allocator.h — device memory allocators, one per device type.
//
// Storage asks the allocator registered for its device type for memory. The
// CPU allocator returns 64-byte aligned blocks (one cache line, one AVX-512
// vector) and keeps byte counters so benchmarks can report memory use. Large
// blocks are mapped from the OS and cached for reuse (Note [CPU block cache]).
// The CUDA slot is filled, on first use, by the CUDA caching allocator when the
// CUDA backend is built (core/cuda/cuda_allocator.h).
// Read before: core/device.h. Read next: core/storage.h.
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/device.h"

namespace lockstep {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  // For a given device of the allocator's type (Storage calls these): the CPU
  // has one device, so they forward; the CUDA allocator allocates on `device`
  // and caches per device (Note [CUDA caching allocator]).
  virtual void* allocate_on(size_t nbytes, Device device) { return allocate(nbytes); }
  virtual void deallocate_on(void* ptr, size_t nbytes, Device device) { deallocate(ptr, nbytes); }
};

// Bytes handed out by an allocator right now and at most since the last reset,
// and (CPU) bytes of large blocks held in the cache, mapped but not in use.
struct AllocatorStats {
  size_t current_bytes = 0;
  size_t peak_bytes = 0;
  size_t cached_bytes = 0;
};

// § Note [CPU block cache]
// Training repeats the same allocations every step: the same activation,
// gradient and scratch sizes, in the same order. Two easy ways to serve them
// both lose. Through malloc, glibc puts blocks under its mmap threshold (which
// rises to 32 MiB after the first large free) on its heap, and a heap full of
// freed holes between live blocks stays resident: a ResNet50 step peaked at
// ~1.6 GB of RSS for ~1.05 GB of live tensors. Mapping every block fresh and
// unmapping it on free keeps RSS at the live bytes but makes every step fault
// in (and zero) every page again, which costs about a quarter of the step.
// So blocks of kLargeBlock bytes or more are mapped directly, rounded up to a
// size class (64 KiB, or 2 MiB from 4 MiB on, 2 MiB-aligned and advised for
// transparent huge pages), and on free go to a cache keyed by size class; an
// allocation takes a cached block of its class, or one at most 1/8 larger,
// before mapping a new one. From the second step on, a repeating workload
// maps nothing: resident memory is the sum over size classes of the most
// blocks of each class alive at once, close to the live peak. The cache holds
// at most cache_limit bytes (default 4 GiB, env LOCKSTEP_CPU_CACHE_MB); a free
// that would exceed it unmaps blocks, largest first. empty_cache() returns
// every cached block to the OS (for a program that changes workload).
// Small blocks go to malloc, which serves them well.
class CPUAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kLargeBlock = size_t{1} << 20;  // 1 MiB

  CPUAllocator();
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  AllocatorStats stats() const;
  void reset_peak() { peak_.store(current_.load()); }

  void empty_cache();                   // unmap every cached block
  void set_cache_limit(size_t bytes);   // unmaps cached blocks beyond it
  size_t cache_limit() const;

 private:
  void release_cached_locked(size_t keep_at_most);  // unmap until cached <= keep_at_most

  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};
  mutable std::mutex mutex_;                       // guards the members below
  std::multimap<size_t, void*> cached_;            // size class -> free mapped block
  std::unordered_map<void*, size_t> mapped_size_;  // every mapped block -> its size class
  size_t cached_bytes_ = 0;
  size_t cache_limit_ = 0;
};

// The allocator for a device type; throws if none is registered (CUDA in a
// CPU-only build). The CUDA allocator is registered lazily by the first call.
Allocator* get_allocator(DeviceType type);
void set_allocator(DeviceType type, Allocator* allocator);
CPUAllocator& cpu_allocator();

}  // namespace lockstep
