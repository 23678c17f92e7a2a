// core/native/memory.cpp — allocating, filling, copying and converting tensors.
// Read before: core/native/native.h. Read next: core/native/views.cpp.
#include <cstring>
#include <limits>

#include "core/native/cuda_dispatch.h"
#include "core/native/elementwise_loop.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/shape.h"

namespace lockstep::native {

namespace {
void check_cpu(const Tensor& t, const char* op) {
  LS_CHECK(t.device().is_cpu(), op, ": tensor is on ", t.device().str(),
           " but this kernel runs on the CPU; move the tensor with .to(ls::Device::cpu())");
}

// Note [Contiguous conversions]
// A conversion between two contiguous tensors of one shape (to_dtype, the
// autocast casts of every weight once per step, float32 <-> bfloat16
// activations) is one flat loop, split over the threads: the general path's
// offset walk costs ~2 ns an element, ~50 ms a ResNet50 step for its weights'
// casts alone. The values are the general path's: convert<D> element by
// element, a bfloat16 rounded through its bits (store_element) so that the
// loop vectorises. A strided copy whose last dim is contiguous on both sides
// (a permuted view made contiguous: BERT's attention heads) goes a row at a
// time, memmove or the same loop per row.
// d[i] = s[i] converted, i in [0, n).
template <class D, class S>
void convert_run(D* d, const S* s, int64_t n) {
  if constexpr (std::is_same_v<D, S>) {
    std::memmove(d, s, static_cast<size_t>(n) * sizeof(D));
  } else if constexpr (std::is_same_v<D, BFloat16> && !std::is_same_v<S, Half>) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) detail::store_element(d[i], static_cast<float>(s[i]));
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) d[i] = convert<D>(s[i]);
  }
}

void convert_contiguous(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  dispatch_all(dst.dtype(), [&]<class D>() {
    dispatch_all(src.dtype(), [&]<class S>() {
      D* d = static_cast<D*>(dst.impl()->storage->data()) + dst.storage_offset();
      const S* s = static_cast<const S*>(src.impl()->storage->data()) + src.storage_offset();
      parallel_for(0, n, 1 << 15, [&](int64_t lo, int64_t hi) { convert_run(d + lo, s + lo, hi - lo); });
    });
  });
}

// dst = src (broadcast by src_strides), both with unit stride on the last dim.
void copy_rows(const Tensor& dst, const Tensor& src, const IntList& src_strides) {
  const IntList outer(dst.sizes().begin(), dst.sizes().end() - 1);
  const IntList dst_outer(dst.strides().begin(), dst.strides().end() - 1);
  const IntList src_outer(src_strides.begin(), src_strides.end() - 1);
  const int64_t row = dst.sizes().back();
  dispatch_all(dst.dtype(), [&]<class D>() {
    dispatch_all(src.dtype(), [&]<class S>() {
      D* d = static_cast<D*>(dst.impl()->storage->data()) + dst.storage_offset();
      const S* s = static_cast<const S*>(src.impl()->storage->data()) + src.storage_offset();
      for_each_offset(outer, {dst_outer, src_outer}, [&](const int64_t* off) { convert_run(d + off[0], s + off[1], row); });
    });
  });
}
}  // namespace

Tensor empty(const IntList& sizes, ScalarType dtype, Device device) {
  for (int64_t s : sizes) {
    LS_CHECK(s >= 0, "empty: negative size in shape ", shape_str(sizes));
  }
  const int64_t n = numel_of(sizes);  // throws when the product overflows
  LS_CHECK(n <= std::numeric_limits<int64_t>::max() / static_cast<int64_t>(element_size(dtype)), "empty: shape ",
           shape_str(sizes), " of ", dtype_name(dtype), " needs more bytes than int64 can count");
  auto storage = std::make_shared<StorageImpl>(static_cast<size_t>(n) * element_size(dtype), device);
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), sizes, contiguous_strides(sizes),
                                             0, dtype));
}

Tensor empty_like(const Tensor& t) { return empty(t.sizes(), t.dtype(), t.device()); }

Tensor zeros(const IntList& sizes, ScalarType dtype, Device device) {
  Tensor t = empty(sizes, dtype, device);
  if (!device.is_cpu()) {
    fill_(t, 0.0);  // on the device (Note [CUDA dispatch])
  } else if (t.nbytes() > 0) {
    std::memset(t.raw_data(), 0, t.nbytes());
  }
  return t;
}

Tensor zeros_like(const Tensor& t) {
  LS_DISPATCH_CUDA(t, zeros_like(t));
  return zeros(t.sizes(), t.dtype());
}

void fill_(const Tensor& self, double value) {
  LS_DISPATCH_CUDA(self, fill_(self, value));
  check_cpu(self, "fill_");
  dispatch_all(self.dtype(), [&]<class T>() {
    T v = convert<T>(value);
    T* base = static_cast<T*>(self.impl()->storage->data()) + self.storage_offset();
    if (self.is_contiguous()) {
      int64_t n = self.numel();
      parallel_for(0, n, 1 << 16, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) base[i] = v;
      });
      return;
    }
    for_each_offset(self.sizes(), {self.strides()}, [&](const int64_t* off) { base[off[0]] = v; });
  });
}

void copy_(const Tensor& dst, const Tensor& src) {
  LS_DISPATCH_CUDA(dst, copy_(dst, src));
  LS_DISPATCH_CUDA(src, copy_(dst, src));
  check_cpu(dst, "copy_");
  check_cpu(src, "copy_");
  // Validates that src broadcasts to dst's shape (dst's shape must win).
  IntList shape = broadcast_shapes(dst.sizes(), src.sizes(), "copy_");
  LS_CHECK(shape == dst.sizes(), "copy_: source of shape ", src.shape_str(),
           " cannot be broadcast to destination shape ", dst.shape_str());
  const bool same_layout = dst.dtype() == src.dtype() && dst.is_contiguous() &&
                           src.is_contiguous() && dst.sizes() == src.sizes();
  if (same_layout) {
    if (dst.raw_data() != src.raw_data()) std::memmove(dst.raw_data(), src.raw_data(), dst.nbytes());
    return;
  }
  if (dst.is_contiguous() && src.is_contiguous() && dst.sizes() == src.sizes()) {
    convert_contiguous(dst, src);  // a dtype conversion: Note [Contiguous conversions]
    return;
  }
  IntList src_strides = broadcast_strides(src.sizes(), src.strides(), dst.sizes());
  if (dst.dim() >= 2 && dst.strides().back() == 1 && src_strides.back() == 1) {
    copy_rows(dst, src, src_strides);  // Note [Contiguous conversions]
    return;
  }
  dispatch_all(dst.dtype(), [&]<class D>() {
    dispatch_all(src.dtype(), [&]<class S>() {
      D* d = static_cast<D*>(dst.impl()->storage->data()) + dst.storage_offset();
      const S* s = static_cast<const S*>(src.impl()->storage->data()) + src.storage_offset();
      for_each_offset(dst.sizes(), {dst.strides(), src_strides},
                      [&](const int64_t* off) { d[off[0]] = convert<D>(s[off[1]]); });
    });
  });
}

Tensor contiguous(const Tensor& t) {
  LS_DISPATCH_CUDA(t, contiguous(t));
  return t.is_contiguous() ? t : clone(t);
}

Tensor clone(const Tensor& t) {
  LS_DISPATCH_CUDA(t, clone(t));
  Tensor out = empty(t.sizes(), t.dtype(), t.device());
  copy_(out, t);
  return out;
}

Tensor to_dtype(const Tensor& t, ScalarType dtype) {
  LS_DISPATCH_CUDA(t, to_dtype(t, dtype));
  if (t.dtype() == dtype) return t;
  Tensor out = empty(t.sizes(), dtype, t.device());
  copy_(out, t);
  return out;
}

Tensor to_device(const Tensor& t, Device device) {
  LS_CHECK(t.defined(), "to: called on an undefined tensor");
  if (t.device() == device) return t;
  Tensor out = empty(t.sizes(), t.dtype(), device);  // throws in a CPU-only build for CUDA
  copy_(out, t);                                     // dispatches to the CUDA copy
  return out;
}

}  // namespace lockstep::native
