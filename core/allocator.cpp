// core/allocator.cpp — the 64-byte aligned CPU allocator with its large-block
// cache (Note [CPU block cache]) and the per-device registry.
// Read before: core/allocator.h.
#include "core/allocator.h"

#include <pthread.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <new>

#include "core/cuda_hooks.h"
#include "core/env_flag.h"
#include "core/error.h"

namespace lockstep {

namespace {

constexpr size_t kSmallClass = size_t{64} << 10;  // 64 KiB granularity below kHugeFrom
constexpr size_t kHugePage = size_t{2} << 20;     // 2 MiB, a transparent huge page
constexpr size_t kHugeFrom = size_t{4} << 20;     // classes from here on are huge-page sized

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Under AddressSanitizer every block goes to malloc, which ASan instruments: a
// mapped block's rounding slack would hide overflows past a tensor's end.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kUseBlockCache = false;
#else
constexpr bool kUseBlockCache = true;
#endif

// The size class of a large request (see Note [CPU block cache]).
size_t size_class(size_t nbytes) {
  return nbytes >= kHugeFrom ? round_up(nbytes, kHugePage) : round_up(nbytes, kSmallClass);
}

size_t default_cache_limit() {
  // Up to 2^24 MiB (16 TiB): any machine's memory, and no overflow in the shift.
  const long long mb = env_int("LOCKSTEP_CPU_CACHE_MB", 4096, 0, 1LL << 24,
                               "MiB of freed blocks the CPU allocator keeps; 0 disables its cache");
  return static_cast<size_t>(mb) << 20;
}

// Maps `bytes` (a size class) of fresh zeroed memory; classes of huge-page size
// are 2 MiB-aligned and advised for huge pages.
void* map_block(size_t bytes) {
  const bool huge = bytes >= kHugeFrom;
  const size_t span = huge ? bytes + kHugePage : bytes;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  LS_CHECK(raw != MAP_FAILED, "CPUAllocator: out of memory mapping ", bytes,
           " bytes; free tensors, use a smaller batch, or call cpu_allocator().empty_cache()");
  if (!huge) return raw;
  // Trim the mapping to a 2 MiB-aligned window of `bytes`.
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = round_up(start, kHugePage);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t tail = start + span - (aligned + bytes);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  void* block = reinterpret_cast<void*>(aligned);
  madvise(block, bytes, MADV_HUGEPAGE);  // advisory: ignored where THP is off
  return block;
}

}  // namespace

// fork() copies only the calling thread: were another thread inside the cache's
// lock at that moment, the child's first large allocation would wait forever.
// So the process-wide allocator's lock is held across fork (as glibc does for
// malloc's own locks). Registered by the first CPUAllocator, which is cpu_allocator().
CPUAllocator::CPUAllocator() : cache_limit_(default_cache_limit()) {
  static std::once_flag once;
  std::call_once(once, [] {
    pthread_atfork([] { cpu_allocator().mutex_.lock(); },
                   [] { cpu_allocator().mutex_.unlock(); },
                   [] { cpu_allocator().mutex_.unlock(); });
  });
}

void* CPUAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  void* ptr = nullptr;
  if (nbytes < kLargeBlock || !kUseBlockCache) {
    ptr = std::aligned_alloc(kAlignment, round_up(nbytes, kAlignment));
    LS_CHECK(ptr != nullptr, "CPUAllocator: out of memory allocating ", nbytes, " bytes");
  } else {
    const size_t cls = size_class(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // The smallest cached block of this class or at most 1/8 larger.
      auto it = cached_.lower_bound(cls);
      if (it != cached_.end() && it->first <= cls + cls / 8) {
        ptr = it->second;
        cached_bytes_ -= it->first;
        cached_.erase(it);
      }
    }
    if (ptr == nullptr) {
      ptr = map_block(cls);  // outside the lock: mapping may take a while
      std::lock_guard<std::mutex> lock(mutex_);
      mapped_size_.emplace(ptr, cls);
    }
  }
  size_t now = current_.fetch_add(nbytes) + nbytes;
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  return ptr;
}

void CPUAllocator::deallocate(void* ptr, size_t nbytes) {
  if (ptr == nullptr) return;
  current_.fetch_sub(nbytes);
  if (nbytes < kLargeBlock || !kUseBlockCache) {
    std::free(ptr);
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = mapped_size_.find(ptr);
  LS_CHECK(it != mapped_size_.end(), "CPUAllocator: freeing a ", nbytes,
           "-byte block it did not allocate (or freed twice); this is a lockstep bug");
  const size_t cls = it->second;
  if (cls > cache_limit_) {  // can never be cached
    mapped_size_.erase(it);
    munmap(ptr, cls);
    return;
  }
  release_cached_locked(cache_limit_ - cls);
  cached_.emplace(cls, ptr);
  cached_bytes_ += cls;
}

void CPUAllocator::release_cached_locked(size_t keep_at_most) {
  while (cached_bytes_ > keep_at_most) {
    auto largest = std::prev(cached_.end());
    munmap(largest->second, largest->first);
    mapped_size_.erase(largest->second);
    cached_bytes_ -= largest->first;
    cached_.erase(largest);
  }
}

AllocatorStats CPUAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {current_.load(), peak_.load(), cached_bytes_};
}

void CPUAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked(0);
}

void CPUAllocator::set_cache_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  cache_limit_ = bytes;
  release_cached_locked(bytes);
}

size_t CPUAllocator::cache_limit() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cache_limit_;
}

CPUAllocator& cpu_allocator() {
  // Never destroyed: tensors in other statics may be freed after it would be.
  static CPUAllocator* instance = new CPUAllocator();
  return *instance;
}

namespace {
Allocator*& slot(DeviceType type) {
  static Allocator* slots[2] = {&cpu_allocator(), nullptr};
  return slots[static_cast<int>(type)];
}
}  // namespace

Allocator* get_allocator(DeviceType type) {
  Allocator* a = slot(type);
  if (a == nullptr && type == DeviceType::CUDA) {  // the CUDA library's (Note [CUDA hooks])
    a = &detail::cuda_hooks<CudaRuntimeHooks>("allocating CUDA memory").allocator();
  }
  LS_CHECK(a != nullptr, "no allocator for device type ", Device{type, 0}.str());
  return a;
}

void set_allocator(DeviceType type, Allocator* allocator) { slot(type) = allocator; }

}  // namespace lockstep
