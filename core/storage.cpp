// core/storage.cpp — allocation and release of a StorageImpl.
// Read before: core/storage.h.
#include "core/storage.h"

namespace lockstep {

StorageImpl::StorageImpl(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(get_allocator(device.type)) {
  data_ = allocator_->allocate_on(nbytes, device);
}

StorageImpl::StorageImpl(void* external, size_t nbytes, Device device)
    : data_(external), nbytes_(nbytes), device_(device) {}

StorageImpl::~StorageImpl() {
  if (allocator_ != nullptr) allocator_->deallocate_on(data_, nbytes_, device_);
}

}  // namespace lockstep
