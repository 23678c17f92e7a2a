// core/tensor_impl.h — what a Tensor handle points at.
//
// A TensorImpl is a view onto a Storage: `sizes` and `strides` (in elements)
// describe how the logical N-d index maps to memory starting at `offset`.
// Element (i0, i1, ...) lives at data + (offset + sum_k ik * strides[k]) * elsize.
// Views (transpose, narrow, expand, ...) make new TensorImpls on the same
// Storage. Autograd's per-tensor state lives in AutogradMeta, created on demand.
// Read before: core/storage.h. Read next: core/tensor.h.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/storage.h"

namespace lockstep {

struct AutogradMeta;  // core/autograd_meta.h

struct TensorImpl {
  TensorImpl(Storage storage, std::vector<int64_t> sizes, std::vector<int64_t> strides,
             int64_t offset, ScalarType dtype);
  ~TensorImpl();

  Storage storage;
  std::vector<int64_t> sizes;    // logical shape
  std::vector<int64_t> strides;  // elements to step per index, per dim (0 = broadcast)
  int64_t offset = 0;            // first element, in elements from storage start
  ScalarType dtype = kFloat32;
  std::unique_ptr<AutogradMeta> autograd_meta;  // null until autograd touches the tensor
};

// Row-major (C-order) strides for `sizes`: the layout of a contiguous tensor.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes);
// The product of the sizes; throws ls::Error when it overflows int64 (and no size is 0).
int64_t numel_of(const std::vector<int64_t>& sizes);

}  // namespace lockstep
