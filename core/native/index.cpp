// core/native/index.cpp — gathering rows (index_select), scattering them back
// (index_add_) and joining tensors (cat).
//
// All three work on the view (outer, size_along_dim, inner) of a tensor, where
// outer is the product of the sizes before `dim` and inner the product after:
// a slice along `dim` is then `inner` contiguous elements.
// Read before: core/native/views.cpp. Read next: core/native/elementwise.cpp.
#include <cstring>

#include "core/native/native.h"
#include "core/shape.h"

namespace lockstep::native {

namespace {
struct Split {
  int64_t outer = 1, size = 1, inner = 1;
};
Split split_at(const IntList& sizes, int64_t dim) {
  Split s;
  for (int64_t d = 0; d < dim; ++d) s.outer *= sizes[d];
  s.size = sizes[dim];
  for (size_t d = static_cast<size_t>(dim) + 1; d < sizes.size(); ++d) s.inner *= sizes[d];
  return s;
}

// The indices as int64, checked against [-size, size); negatives count from the end.
std::vector<int64_t> checked_indices(const Tensor& index, int64_t size, const char* op) {
  LS_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, op,
           ": index must be int64 or int32, got ", index.dtype());
  LS_CHECK(index.dim() <= 1, op, ": index must be 1-d, got shape ", index.shape_str());
  std::vector<int64_t> idx = index.to_vector<int64_t>();
  for (int64_t& i : idx) {
    LS_CHECK(i >= -size && i < size, op, ": index ", i, " is out of range for a dim of size ",
             size);
    if (i < 0) i += size;
  }
  return idx;
}
}  // namespace

Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index) {
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
  LS_CHECK(self.is_contiguous(), "index_add_: the destination must be contiguous");
  int64_t d = wrap_dim(dim, self.dim(), "index_add_");
  std::vector<int64_t> idx = checked_indices(index, self.sizes()[d], "index_add_");
  IntList expected = self.sizes();
  expected[d] = static_cast<int64_t>(idx.size());
  LS_CHECK(src.sizes() == expected, "index_add_: source shape ", src.shape_str(),
           " does not match ", shape_str(expected), " (destination ", self.shape_str(), " with ",
           idx.size(), " indices along dim ", d, ")");
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
  LS_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  const Tensor& first = tensors[0];
  LS_CHECK(first.dim() > 0, "cat: zero-dimensional tensor (at position 0) cannot be concatenated");
  int64_t d = wrap_dim(dim, first.dim(), "cat");
  ScalarType dtype = first.dtype();
  IntList out_sizes = first.sizes();
  out_sizes[d] = 0;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = tensors[k];
    LS_CHECK(t.dim() == first.dim(), "cat: tensor at position ", k, " has ", t.dim(),
             " dims but tensor 0 has ", first.dim(), " (shapes ", t.shape_str(), " and ",
             first.shape_str(), ")");
    for (int64_t i = 0; i < first.dim(); ++i) {
      LS_CHECK(i == d || t.sizes()[i] == first.sizes()[i], "cat: sizes must match except in dim ",
               d, "; tensor at position ", k, " has shape ", t.shape_str(),
               " but tensor 0 has shape ", first.shape_str());
    }
    dtype = promote_types(dtype, t.dtype());
    out_sizes[d] += t.sizes()[d];
  }
  Tensor out = empty(out_sizes, dtype);
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    int64_t len = t.sizes()[d];
    if (len > 0) copy_(narrow(out, d, at, len), t);
    at += len;
  }
  return out;
}

}  // namespace lockstep::native
