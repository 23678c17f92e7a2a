// core/storage.cpp — allocation and release of a StorageImpl.
// Read before: core/storage.h.
#include "core/storage.h"

#include "core/error.h"

namespace lockstep {

StorageImpl::StorageImpl(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(get_allocator(device.type)) {
  data_ = allocator_->allocate_on(nbytes, device);
}

StorageImpl::StorageImpl(void* external, size_t nbytes, Device device, std::shared_ptr<void> owner)
    : data_(external), nbytes_(nbytes), device_(device), owner_(std::move(owner)) {}

StorageImpl::~StorageImpl() {
  if (allocator_ != nullptr) allocator_->deallocate_on(data_, nbytes_, device_);
}

}  // namespace lockstep
