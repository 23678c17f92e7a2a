// core/native/index.cpp — gathering rows (index_select), scattering them back
// (index_add_) and joining tensors (cat).
//
// All three work on the view (outer, size_along_dim, inner) of a tensor, where
// outer is the product of the sizes before `dim` and inner the product after:
// a slice along `dim` is then `inner` contiguous elements.
// Read before: core/native/views.cpp. Read next: core/native/elementwise.cpp.
#include <cstring>

#include "core/native/cuda_dispatch.h"
#include "core/native/index_rules.h"
#include "core/native/native.h"
#include "core/shape.h"

namespace lockstep::native {

using rules::Split;
using rules::split_at;

namespace {
// The indices as int64, checked against [-size, size); negatives count from the end.
std::vector<int64_t> checked_indices(const Tensor& index, int64_t size, const char* op) {
  rules::check_index_tensor(index, op);
  std::vector<int64_t> idx = index.to_vector<int64_t>();
  for (int64_t& i : idx) {
    rules::check_index_value(i, size, op);
    if (i < 0) i += size;
  }
  return idx;
}
}  // namespace

Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index) {
  LS_DISPATCH_CUDA(t, index_select(t, dim, index));
  LS_DISPATCH_CUDA(index, index_select(t, dim, index));
  LS_CHECK(t.dim() > 0, "index_select: cannot index a 0-d tensor");
  int64_t d = wrap_dim(dim, t.dim(), "index_select");
  std::vector<int64_t> idx = checked_indices(index, t.sizes()[d], "index_select");
  Tensor src = contiguous(t);
  IntList out_sizes = t.sizes();
  out_sizes[d] = static_cast<int64_t>(idx.size());
  Tensor out = empty(out_sizes, t.dtype());
  Split s = split_at(t.sizes(), d);
  const size_t row_bytes = static_cast<size_t>(s.inner) * t.element_size();
  const char* in = static_cast<const char*>(src.raw_data());
  char* o = static_cast<char*>(out.raw_data());
  const int64_t n = static_cast<int64_t>(idx.size());
  for (int64_t b = 0; b < s.outer; ++b) {
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(o + (b * n + i) * row_bytes, in + (b * s.size + idx[i]) * row_bytes, row_bytes);
    }
  }
  return out;
}

void index_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  LS_DISPATCH_CUDA(self, index_add_(self, dim, index, src));
  LS_DISPATCH_CUDA(index, index_add_(self, dim, index, src));
  LS_DISPATCH_CUDA(src, index_add_(self, dim, index, src));
  LS_CHECK(self.is_contiguous(), "index_add_: the destination must be contiguous");
  int64_t d = wrap_dim(dim, self.dim(), "index_add_");
  std::vector<int64_t> idx = checked_indices(index, self.sizes()[d], "index_add_");
  rules::check_index_add_source(self, src, d, static_cast<int64_t>(idx.size()));
  Tensor s_src = contiguous(to_dtype(src, self.dtype()));
  Split s = split_at(self.sizes(), d);
  const int64_t n = static_cast<int64_t>(idx.size());
  dispatch(self.dtype(), "index_add_", [&]<class T>() {
    T* out = self.data_ptr<T>();
    const T* in = s_src.data_ptr<T>();
    for (int64_t b = 0; b < s.outer; ++b) {
      for (int64_t i = 0; i < n; ++i) {
        T* dst = out + (b * s.size + idx[i]) * s.inner;
        const T* row = in + (b * n + i) * s.inner;
        for (int64_t j = 0; j < s.inner; ++j) dst[j] = static_cast<T>(dst[j] + row[j]);
      }
    }
  });
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  for (const Tensor& t : tensors) LS_DISPATCH_CUDA(t, cat(tensors, dim));
  const rules::CatShape shape = rules::cat_shape(tensors, dim, [](const Tensor&) {});
  const int64_t d = shape.dim;
  Tensor out = empty(shape.sizes, shape.dtype);
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    int64_t len = t.sizes()[d];
    if (len > 0) copy_(narrow(out, d, at, len), t);
    at += len;
  }
  return out;
}

}  // namespace lockstep::native
