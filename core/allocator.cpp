// core/allocator.cpp — the 64-byte aligned CPU allocator and the per-device registry.
// Read before: core/allocator.h.
#include "core/allocator.h"

#include <cstdlib>
#include <new>

#include "core/error.h"

namespace lockstep {

void* CPUAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  void* ptr = std::aligned_alloc(kAlignment, rounded);
  LS_CHECK(ptr != nullptr, "CPUAllocator: out of memory allocating ", nbytes, " bytes");
  size_t now = current_.fetch_add(nbytes) + nbytes;
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  return ptr;
}

void CPUAllocator::deallocate(void* ptr, size_t nbytes) {
  if (ptr == nullptr) return;
  std::free(ptr);
  current_.fetch_sub(nbytes);
}

CPUAllocator& cpu_allocator() {
  static CPUAllocator instance;
  return instance;
}

namespace {
Allocator*& slot(DeviceType type) {
  static Allocator* slots[2] = {&cpu_allocator(), nullptr};
  return slots[static_cast<int>(type)];
}
}  // namespace

Allocator* get_allocator(DeviceType type) {
  Allocator* a = slot(type);
  LS_CHECK(a != nullptr, "no allocator for device type ", Device{type, 0}.str(),
           ": this build of lockstep has no CUDA support (configure with -DLOCKSTEP_CUDA=ON on a "
           "machine with the CUDA toolkit)");
  return a;
}

void set_allocator(DeviceType type, Allocator* allocator) { slot(type) = allocator; }

}  // namespace lockstep
