// core/allocator.h — device memory allocators, one per device type.
//
// Storage asks the allocator registered for its device type for memory. The
// CPU allocator returns 64-byte aligned blocks (one cache line, one AVX-512
// vector) and keeps byte counters so benchmarks can report memory use. The CUDA
// slot is filled by the CUDA backend when it is built.
// Read before: core/device.h. Read next: core/storage.h.
#pragma once

#include <atomic>
#include <cstddef>

#include "core/device.h"

namespace lockstep {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
};

// Bytes handed out by an allocator right now and at most since the last reset.
struct AllocatorStats {
  size_t current_bytes = 0;
  size_t peak_bytes = 0;
};

class CPUAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  AllocatorStats stats() const { return {current_.load(), peak_.load()}; }
  void reset_peak() { peak_.store(current_.load()); }

 private:
  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};
};

// The allocator for a device type; throws if none is registered (e.g. CUDA in a
// CPU-only build).
Allocator* get_allocator(DeviceType type);
void set_allocator(DeviceType type, Allocator* allocator);
CPUAllocator& cpu_allocator();

}  // namespace lockstep
