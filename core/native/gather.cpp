// core/native/gather.cpp — gather, scatter, scatter_add_ (see core/native/gather.h).
//
// One loop serves the three: walk index's elements in row-major order, keeping
// the multi-index; the element of `self` addressed is the multi-index with dim
// replaced by the index value, the element of src / out the multi-index itself.
// Read before: core/native/gather.h.
#include "core/native/gather.h"

#include "core/native/native.h"
#include "core/shape.h"

namespace lockstep::native {

namespace {

// Checks index against self (and src), returns the wrapped dim.
int64_t check_operands(const char* op, const Tensor& self, int64_t dim, const Tensor& index,
                       const Tensor* src) {
  detail::check_defined(self, op);
  detail::check_defined(index, op);
  LS_CHECK(self.device().is_cpu() && index.device().is_cpu() && (!src || src->device().is_cpu()),
           op, ": runs on the CPU only (self on ", self.device(), ", index on ", index.device(),
           "); move the tensors with .to(ls::kCPU)");
  LS_CHECK(index.dtype() == kInt64, op, ": index must be int64 but has dtype ", index.dtype());
  LS_CHECK(index.dim() == self.dim(), op, ": index ", index.shape_str(), " must have as many dims as self ",
           self.shape_str());
  const int64_t d = wrap_dim(dim, std::max<int64_t>(self.dim(), 1), op);
  for (int64_t k = 0; k < index.dim(); ++k) {
    if (k == d) continue;
    LS_CHECK(index.size(k) <= self.size(k), op, ": index ", index.shape_str(), " is larger than self ",
             self.shape_str(), " in dim ", k, " (only dim ", d, " may differ)");
  }
  if (src) {
    detail::check_defined(*src, op);
    LS_CHECK(src->dim() == index.dim(), op, ": src ", src->shape_str(), " must have as many dims as index ",
             index.shape_str());
    for (int64_t k = 0; k < index.dim(); ++k) {
      LS_CHECK(index.size(k) <= src->size(k), op, ": index ", index.shape_str(), " is larger than src ",
               src->shape_str(), " in dim ", k);
    }
  }
  return d;
}

// Calls fn(self_offset, other_offset) for every element of index, where other is a
// tensor of at least index's sizes (out for gather, src for the scatters).
template <class Fn>
void for_each_index(const char* op, const Tensor& self, int64_t d, const Tensor& index,
                    const Tensor& other, Fn fn) {
  const int64_t n = index.numel();
  if (n == 0) return;
  const int64_t nd = index.dim();
  const Tensor idx = contiguous(index);
  const int64_t* ip = idx.data_ptr<int64_t>();
  const int64_t limit = self.dim() == 0 ? 1 : self.size(d);
  IntList pos(static_cast<size_t>(nd), 0);
  for (int64_t flat = 0; flat < n; ++flat) {
    const int64_t i = ip[flat];
    LS_CHECK(i >= 0 && i < limit, op, ": index ", i, " is out of range for dim ", d, " of size ", limit);
    int64_t self_off = self.storage_offset(), other_off = other.storage_offset();
    for (int64_t k = 0; k < nd; ++k) {
      self_off += (k == d ? i : pos[k]) * self.stride(k);
      other_off += pos[k] * other.stride(k);
    }
    fn(self_off, other_off);
    for (int64_t k = nd - 1; k >= 0; --k) {  // next multi-index, row-major
      if (++pos[k] < index.size(k)) break;
      pos[k] = 0;
    }
  }
}

template <class T>
T* base(const Tensor& t) { return static_cast<T*>(t.impl()->storage->data()); }

}  // namespace

Tensor gather(const Tensor& self, int64_t dim, const Tensor& index) {
  const int64_t d = check_operands("gather", self, dim, index, nullptr);
  Tensor out = empty(index.sizes(), self.dtype(), self.device());
  dispatch_all(self.dtype(), [&]<class T>() {
    const T* s = base<T>(self);
    T* o = base<T>(out);
    for_each_index("gather", self, d, index, out, [&](int64_t so, int64_t oo) { o[oo] = s[so]; });
  });
  return out;
}

Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t d = check_operands("scatter", self, dim, index, &src);
  Tensor out = clone(self);
  const Tensor values = to_dtype(src, self.dtype());
  dispatch_all(self.dtype(), [&]<class T>() {
    T* o = base<T>(out);
    const T* v = base<T>(values);
    for_each_index("scatter", out, d, index, values, [&](int64_t oo, int64_t vo) { o[oo] = v[vo]; });
  });
  return out;
}

void scatter_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t d = check_operands("scatter_add_", self, dim, index, &src);
  const Tensor values = to_dtype(src, self.dtype());
  dispatch(self.dtype(), "scatter_add_", [&]<class T>() {
    T* o = base<T>(self);
    const T* v = base<T>(values);
    for_each_index("scatter_add_", self, d, index, values,
                   [&](int64_t oo, int64_t vo) { o[oo] = static_cast<T>(o[oo] + v[vo]); });
  });
  self.impl()->storage->bump_version();
}

}  // namespace lockstep::native
