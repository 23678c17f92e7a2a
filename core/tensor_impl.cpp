// core/tensor_impl.cpp — TensorImpl construction and layout helpers.
// Read before: core/tensor_impl.h.
#include "core/tensor_impl.h"

#include "core/autograd_meta.h"

namespace lockstep {

TensorImpl::TensorImpl(Storage storage_, std::vector<int64_t> sizes_,
                       std::vector<int64_t> strides_, int64_t offset_, ScalarType dtype_)
    : storage(std::move(storage_)),
      sizes(std::move(sizes_)),
      strides(std::move(strides_)),
      offset(offset_),
      dtype(dtype_) {}

TensorImpl::~TensorImpl() = default;

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t step = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = step;
    step *= sizes[i] > 0 ? sizes[i] : 1;
  }
  return strides;
}

int64_t numel_of(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

}  // namespace lockstep
