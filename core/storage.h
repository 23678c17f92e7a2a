// core/storage.h — a reference-counted block of device memory.
//
// Tensors are views onto a Storage: several tensors (a tensor and its
// transpose, say) may share one. The storage also carries the version counter
// that in-place ops bump; autograd compares it with the version it saved to
// detect "a tensor needed for backward was modified in place" (see
// Note [Saved tensor versions] in autograd/saved_variable.h). A write started
// asynchronously (a collective receiving into it) may be attached: data()
// waits for it first (Note [Pending writes], core/pending_write.h).
// Read before: core/allocator.h. Read next: core/pending_write.h, core/tensor_impl.h.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "core/allocator.h"
#include "core/device.h"
#include "core/pending_write.h"

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

  // The memory, once any pending write has landed (Note [Pending writes]).
  void* data() const {
    if (has_pending_write_.load(std::memory_order_acquire)) [[unlikely]] finish_pending_write();
    return data_;
  }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

  // Note [Pending writes]. Attaching waits for a write already attached.
  void attach_pending_write(std::shared_ptr<PendingWrite> write);
  bool has_pending_write() const { return has_pending_write_.load(std::memory_order_acquire); }
  // Waits for the attached write (if any; not on a PendingWriteBypass thread)
  // and detaches it; rethrows its error (then it stays attached).
  void finish_pending_write() const;

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;  // null for external memory
  std::shared_ptr<void> owner_;     // external memory's keeper, if any
  uint64_t version_ = 0;
  mutable std::mutex pending_mutex_;
  mutable std::shared_ptr<PendingWrite> pending_write_;
  mutable std::atomic<bool> has_pending_write_{false};
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace lockstep
