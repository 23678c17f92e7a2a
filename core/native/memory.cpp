// core/native/memory.cpp — allocating, filling, copying and converting tensors.
// Read before: core/native/native.h. Read next: core/native/copy_kernels.h (the loops of copy_).
#include <cstring>
#include <limits>

#include "core/native/cuda_dispatch.h"
#include "core/native/copy_kernels.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/shape.h"

namespace lockstep::native {

namespace {
void check_cpu(const Tensor& t, const char* op) {
  LS_CHECK(t.device().is_cpu(), op, ": tensor is on ", t.device().str(),
           " but this kernel runs on the CPU; move the tensor with .to(ls::Device::cpu())");
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
  if (dst.numel() == 0) return;
  const auto [d, src_strides] =
      in_dst_order(dst, broadcast_strides(src.sizes(), src.strides(), dst.sizes()));
  switch (copy_path(d, src, src_strides)) {  // Note [Copy loops], copy_kernels.h
    case CopyPath::Flat: return copy_flat(d, src);
    case CopyPath::Rows: return copy_rows(d, src, src_strides);
    case CopyPath::Transposed: return copy_transposed(d, src, src_strides);
    case CopyPath::Walk: return copy_walk(d, src, src_strides);
  }
}

void copy_reference_(const Tensor& dst, const Tensor& src) {
  check_cpu(dst, "copy_reference_");
  check_cpu(src, "copy_reference_");
  LS_CHECK(broadcast_shapes(dst.sizes(), src.sizes(), "copy_reference_") == dst.sizes(),
           "copy_reference_: source of shape ", src.shape_str(), " cannot be broadcast to destination shape ",
           dst.shape_str());
  copy_walk(dst, src, broadcast_strides(src.sizes(), src.strides(), dst.sizes()));
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
  // A channels-last t stays channels-last (Note [Channels-last activations]).
  Tensor out = t.device().is_cpu() ? result_like(t.sizes(), dtype, {&t})
                                   : empty(t.sizes(), dtype, t.device());
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
