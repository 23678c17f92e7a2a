// core/storage.cpp — allocation and release of a StorageImpl, and its pending write.
// Read before: core/storage.h, core/pending_write.h.
#include "core/storage.h"

#include "core/error.h"

namespace lockstep {

StorageImpl::StorageImpl(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(get_allocator(device.type)) {
  data_ = allocator_->allocate_on(nbytes, device);
}

StorageImpl::StorageImpl(void* external, size_t nbytes, Device device, std::shared_ptr<void> owner)
    : data_(external), nbytes_(nbytes), device_(device), owner_(std::move(owner)) {}

void StorageImpl::attach_pending_write(std::shared_ptr<PendingWrite> write) {
  finish_pending_write();
  std::lock_guard<std::mutex> lock(pending_mutex_);
  LS_CHECK(pending_write_ == nullptr || pending_write_->done(), "StorageImpl::attach_pending_write: a write is "
           "still landing in this storage and this thread (a PendingWriteBypass thread) cannot wait for it; "
           "attach from the thread that issued the write");
  pending_write_ = std::move(write);
  has_pending_write_.store(pending_write_ != nullptr, std::memory_order_release);
}

void StorageImpl::finish_pending_write() const {
  if (PendingWriteBypass::active()) return;
  std::shared_ptr<PendingWrite> write;
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    write = pending_write_;
  }
  if (write == nullptr) return;
  write->wait();  // throws if it failed: stays attached
  if (!write->done()) return;  // called from the write's own finish: it is still landing
  std::lock_guard<std::mutex> lock(pending_mutex_);
  if (pending_write_ == write) {
    pending_write_.reset();
    has_pending_write_.store(false, std::memory_order_release);
  }
}

StorageImpl::~StorageImpl() {
  if (allocator_ != nullptr) allocator_->deallocate_on(data_, nbytes_, device_);
}

}  // namespace lockstep
