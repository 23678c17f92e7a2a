// core/storage.h — a reference-counted block of device memory.
//
// Tensors are views onto a Storage: several tensors (a tensor and its
// transpose, say) may share one. The storage also carries the version counter
// that in-place ops bump; autograd compares it with the version it saved to
// detect "a tensor needed for backward was modified in place" (see
// Note [Saved tensor versions] in autograd/saved_variable.h). It holds no
// other state: a write still under way (a collective receiving into it) is
// waited for by whoever started it, before the memory is used (ZeRO's
// broadcasts: Note [ZeRO broadcasts overlap the next forward]).
// Read before: core/allocator.h. Read next: core/tensor_impl.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/allocator.h"
#include "core/device.h"

namespace lockstep {

class StorageImpl {
 public:
  StorageImpl(size_t nbytes, Device device);
  // Wraps memory owned elsewhere (not freed by lockstep); used for zero-copy views.
  // `owner`, when set, is kept alive as long as this storage: whatever frees the
  // memory when its last user is gone (a shared-memory buffer, say).
  StorageImpl(void* external, size_t nbytes, Device device, std::shared_ptr<void> owner = nullptr);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;  // null for external memory
  std::shared_ptr<void> owner_;     // external memory's keeper, if any
  uint64_t version_ = 0;
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace lockstep
