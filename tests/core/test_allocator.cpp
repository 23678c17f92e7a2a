// tests/core/test_allocator.cpp — the CPU allocator: alignment, byte counters,
// and the large-block cache (Note [CPU block cache]): a freed large block is
// handed out again for the same size class or one up to 1/8 smaller, not for a
// much smaller one; the cache limit and empty_cache() return blocks to the OS.
// The allocator is process-wide, so the checks use differences and restore the limit.
// Under AddressSanitizer the cache is off (core/allocator.cpp): freed blocks must not stay.
// Read before: core/allocator.h.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>

#include "core/allocator.h"

namespace ls = lockstep;

namespace {
constexpr size_t kMiB = size_t{1} << 20;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCacheOn = false;
#else
constexpr bool kCacheOn = true;
#endif

bool aligned(void* p) { return reinterpret_cast<uintptr_t>(p) % ls::CPUAllocator::kAlignment == 0; }
}  // namespace

TEST_CASE("allocator: small and large blocks are 64-byte aligned and counted") {
  ls::CPUAllocator& a = ls::cpu_allocator();
  const size_t before = a.stats().current_bytes;
  void* small = a.allocate(1000);
  void* large = a.allocate(3 * kMiB + 5);
  CHECK(aligned(small));
  CHECK(aligned(large));
  CHECK(a.stats().current_bytes == before + 1000 + 3 * kMiB + 5);
  std::memset(large, 7, 3 * kMiB + 5);  // the whole block is writable
  a.deallocate(small, 1000);
  a.deallocate(large, 3 * kMiB + 5);
  CHECK(a.stats().current_bytes == before);
  CHECK(a.allocate(0) == nullptr);
}

TEST_CASE("allocator: a freed large block is cached and reused for its size class") {
  ls::CPUAllocator& a = ls::cpu_allocator();
  if (!kCacheOn) {
    a.deallocate(a.allocate(18 * kMiB), 18 * kMiB);
    CHECK(a.stats().cached_bytes == 0);
    return;
  }
  a.empty_cache();
  CHECK(a.stats().cached_bytes == 0);
  void* p = a.allocate(18 * kMiB);
  a.deallocate(p, 18 * kMiB);
  CHECK(a.stats().cached_bytes == 18 * kMiB);  // 18 MiB is a whole number of 2 MiB pages
  void* q = a.allocate(18 * kMiB - 100);       // the same class
  CHECK(q == p);
  CHECK(a.stats().cached_bytes == 0);
  a.deallocate(q, 18 * kMiB - 100);
  void* r = a.allocate(15 * kMiB + kMiB / 2);  // class 16 MiB: 18 is at most 1/8 larger...
  CHECK(r == p);                               // ...so the cached block serves it
  a.deallocate(r, 15 * kMiB + kMiB / 2);
  void* s = a.allocate(14 * kMiB);  // 18 MiB is more than 1/8 above 14: a new block
  CHECK(s != p);
  CHECK(a.stats().cached_bytes == 18 * kMiB);
  a.deallocate(s, 14 * kMiB);
  CHECK(a.stats().cached_bytes == 32 * kMiB);
  a.empty_cache();
  CHECK(a.stats().cached_bytes == 0);
}

TEST_CASE("allocator: the cache limit unmaps blocks instead of caching them") {
  ls::CPUAllocator& a = ls::cpu_allocator();
  if (!kCacheOn) return;  // nothing is cached: see the test above
  const size_t old_limit = a.cache_limit();
  a.empty_cache();
  a.set_cache_limit(6 * kMiB);
  void* p = a.allocate(4 * kMiB);
  void* q = a.allocate(4 * kMiB);
  a.deallocate(p, 4 * kMiB);
  CHECK(a.stats().cached_bytes == 4 * kMiB);
  a.deallocate(q, 4 * kMiB);  // 8 MiB would exceed 6: one block is unmapped
  CHECK(a.stats().cached_bytes == 4 * kMiB);
  a.set_cache_limit(0);  // no cache at all: the cached block goes too
  CHECK(a.stats().cached_bytes == 0);
  void* r = a.allocate(2 * kMiB);
  a.deallocate(r, 2 * kMiB);
  CHECK(a.stats().cached_bytes == 0);
  a.set_cache_limit(old_limit);
  CHECK(a.cache_limit() == old_limit);
}
