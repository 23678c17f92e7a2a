// core/native/index_rules.h — the argument checks and shapes of index_select,
// index_add_ and cat, shared by core/native/index.cpp and core/cuda/index.cu
// (see Note [Shared kernel rules] in core/native/elementwise_rules.h).
//
// All three work on the view (outer, size_along_dim, inner) of a tensor, where
// outer is the product of the sizes before `dim` and inner the product after.
//
// Read before: core/native/index.cpp. Read next: core/cuda/index.cu.
#pragma once

#include <cstdint>
#include <vector>

#include "core/native/native.h"
#include "core/shape.h"

namespace lockstep::native::rules {

struct Split {
  int64_t outer = 1, size = 1, inner = 1;
};

inline Split split_at(const IntList& sizes, int64_t dim) {
  Split s;
  for (int64_t d = 0; d < dim; ++d) s.outer *= sizes[d];
  s.size = sizes[dim];
  for (size_t d = static_cast<size_t>(dim) + 1; d < sizes.size(); ++d) s.inner *= sizes[d];
  return s;
}

// An index tensor: int64 or int32, at most 1-d.
inline void check_index_tensor(const Tensor& index, const char* op) {
  LS_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, op,
           ": index must be int64 or int32, got ", index.dtype());
  LS_CHECK(index.dim() <= 1, op, ": index must be 1-d, got shape ", index.shape_str());
}

// One index value, in [-size, size) (negatives count from the end).
inline void check_index_value(int64_t i, int64_t size, const char* op) {
  LS_CHECK(i >= -size && i < size, op, ": index ", i, " is out of range for a dim of size ", size);
}

// index_add_'s source: self's shape with n indices along dim d.
inline void check_index_add_source(const Tensor& self, const Tensor& src, int64_t d, int64_t n) {
  IntList expected = self.sizes();
  expected[d] = n;
  LS_CHECK(src.sizes() == expected, "index_add_: source shape ", src.shape_str(),
           " does not match ", shape_str(expected), " (destination ", self.shape_str(), " with ",
           n, " indices along dim ", d, ")");
}

// cat's result: the wrapped dim, the promoted dtype and the shape. `check_each(t)`
// runs on every tensor before its shape is checked (the CUDA kernel checks its device).
struct CatShape {
  int64_t dim = 0;
  ScalarType dtype = kFloat32;
  IntList sizes;
};

template <class EachCheck>
CatShape cat_shape(const std::vector<Tensor>& tensors, int64_t dim, EachCheck&& check_each) {
  LS_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  const Tensor& first = tensors[0];
  LS_CHECK(first.dim() > 0, "cat: zero-dimensional tensor (at position 0) cannot be concatenated");
  CatShape r;
  const int64_t d = wrap_dim(dim, first.dim(), "cat");
  r.dim = d;
  r.dtype = first.dtype();
  r.sizes = first.sizes();
  r.sizes[d] = 0;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = tensors[k];
    check_each(t);
    LS_CHECK(t.dim() == first.dim(), "cat: tensor at position ", k, " has ", t.dim(),
             " dims but tensor 0 has ", first.dim(), " (shapes ", t.shape_str(), " and ",
             first.shape_str(), ")");
    for (int64_t i = 0; i < first.dim(); ++i) {
      LS_CHECK(i == d || t.sizes()[i] == first.sizes()[i], "cat: sizes must match except in dim ",
               d, "; tensor at position ", k, " has shape ", t.shape_str(),
               " but tensor 0 has shape ", first.shape_str());
    }
    r.dtype = promote_types(r.dtype, t.dtype());
    r.sizes[d] += t.sizes()[d];
  }
  return r;
}

}  // namespace lockstep::native::rules
