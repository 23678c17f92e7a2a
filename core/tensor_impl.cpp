// core/tensor_impl.cpp — TensorImpl construction and layout helpers.
// Read before: core/tensor_impl.h.
#include "core/tensor_impl.h"

#include "core/autograd_meta.h"
#include "core/error.h"

#include <string>

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
  bool overflow = false;
  for (int64_t s : sizes) overflow |= __builtin_mul_overflow(n, s, &n);
  if (!overflow) return n;
  for (int64_t s : sizes) {
    if (s == 0) return 0;  // an empty dimension: no elements, however large the others
  }
  std::string shape;
  for (int64_t s : sizes) shape += (shape.empty() ? "" : ", ") + std::to_string(s);
  throw Error(detail::str("shape [", shape, "] has more elements than int64 can count (the product of its sizes "
                          "overflows 2^63 - 1); check the sizes passed to the factory or view"));
}

}  // namespace lockstep
