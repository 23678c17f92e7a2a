// core/cuda/index.cu — index_select, index_add_ and cat on a CUDA device.
//
// The index may live on the CPU (it is checked there, then uploaded) or on the
// device. A device index is checked by the kernel itself: an out-of-range
// entry is written to a one-element flag instead of being used, and the flag
// is read back after the launch (a synchronisation of the stream, the price of
// an error message instead of a corrupted tensor). Indices may be negative
// (counted from the end), as on the CPU.
// index_add_ accumulates with atomicAdd, so repeated indices add up correctly;
// it takes float32/float64/int32/int64 (the dtypes with hardware atomics).
// cat copies each input into a narrow view of the result (copy_ converts dtypes).
// Read before: core/native/index.cpp, core/cuda/cuda_loops.cuh.
// Read next: core/cuda/cuda_native_nn.h.
#include "core/cuda/cuda_loops.cuh"
#include "core/cuda/cuda_native.h"
#include "core/native/index_rules.h"

namespace lockstep::cuda_native {

using namespace detail;
using native::rules::Split;
using native::rules::split_at;

namespace {

constexpr int64_t kNoBadIndex = INT64_MIN;

// The index as a contiguous int64 tensor on `device`; a CPU index is range-checked here.
Tensor prepare_index(const Tensor& index, int64_t size, Device device, const char* op) {
  LS_CHECK(index.defined(), op, ": got an undefined index tensor");
  native::rules::check_index_tensor(index, op);
  if (index.device().is_cpu()) {
    for (int64_t i : index.to_vector<int64_t>()) native::rules::check_index_value(i, size, op);
    return to_device(native::contiguous(native::to_dtype(index, kInt64)), device);
  }
  check_on_device(op, device, {&index});
  return native::view(contiguous(to_dtype(index, kInt64)), {index.numel()});
}

// Throws if the kernel flagged an out-of-range device index (reads `bad` back).
void check_bad_index(const Tensor& bad, int64_t size, const char* op) {
  Tensor host = native::empty({1}, kInt64, Device::cpu());
  copy_(host, bad);
  const int64_t i = host.data_ptr<int64_t>()[0];
  LS_CHECK(i == kNoBadIndex, op, ": index ", i, " is out of range for a dim of size ", size);
}

// Element i of the (outer, n, inner) gathered side maps to element *at of the
// (outer, size, inner) indexed side through idx[k]; false (and *bad set) when
// idx[k] is out of range.
__device__ __forceinline__ bool indexed_offset(int64_t i, const int64_t* idx, int64_t size,
                                               int64_t n, int64_t inner, int64_t* bad,
                                               int64_t* at) {
  const int64_t j = i % inner, k = (i / inner) % n, b = i / (inner * n);
  int64_t s = idx[k];
  if (s < 0) s += size;
  if (s < 0 || s >= size) {
    *bad = idx[k];
    return false;
  }
  *at = (b * size + s) * inner + j;
  return true;
}

template <class T>
__global__ void index_select_kernel(const T* in, T* out, const int64_t* idx, int64_t outer,
                                    int64_t size, int64_t n, int64_t inner, int64_t* bad) {
  const int64_t total = outer * n * inner;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t at = 0;
    if (indexed_offset(i, idx, size, n, inner, bad, &at)) out[i] = in[at];
  }
}

template <class T>
__device__ __forceinline__ void atomic_add(T* address, T v) {
  if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(address), static_cast<unsigned long long>(v));
  } else {
    atomicAdd(address, v);
  }
}

template <class T>
__global__ void index_add_kernel(T* out, const T* src, const int64_t* idx, int64_t outer,
                                 int64_t size, int64_t n, int64_t inner, int64_t* bad) {
  const int64_t total = outer * n * inner;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t at = 0;
    if (indexed_offset(i, idx, size, n, inner, bad, &at)) atomic_add(out + at, src[i]);
  }
}

Tensor bad_flag(Device device) {
  Tensor bad = native::empty({1}, kInt64, device);
  fill_(bad, static_cast<double>(kNoBadIndex));
  return bad;
}

}  // namespace

Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index) {
  LS_CHECK(t.dim() > 0, "index_select: cannot index a 0-d tensor");
  cuda::DeviceGuard guard(t.device());
  const int64_t d = wrap_dim(dim, t.dim(), "index_select");
  const Tensor idx = prepare_index(index, t.size(d), t.device(), "index_select");
  const Tensor src = contiguous(t);
  IntList out_sizes = t.sizes();
  out_sizes[d] = idx.numel();
  Tensor out = native::empty(out_sizes, t.dtype(), t.device());
  const Split s = split_at(t.sizes(), d);
  const int64_t total = out.numel();
  if (total == 0) return out;
  Tensor bad = bad_flag(t.device());
  dev_dispatch_all(t.dtype(), [&]<class T>() {
    index_select_kernel<T><<<grid_for(total), kThreads, 0, cuda::current_stream(t.device().index)>>>(
        dev_ptr<const T>(src), dev_ptr<T>(out), dev_ptr<const int64_t>(idx), s.outer, s.size,
        idx.numel(), s.inner, dev_ptr<int64_t>(bad));
    LS_CUDA_CHECK_LAUNCH();
  });
  if (index.device().is_cuda()) check_bad_index(bad, s.size, "index_select");
  return out;
}

void index_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  LS_CHECK(self.is_contiguous(), "index_add_: the destination must be contiguous");
  check_on_device("index_add_", self.device(), {&self, &src});
  cuda::DeviceGuard guard(self.device());
  LS_CHECK(self.dtype() == kFloat32 || self.dtype() == kFloat64 || self.dtype() == kInt32 ||
               self.dtype() == kInt64,
           "index_add_ (CUDA): the destination has dtype ", self.dtype(),
           " but the CUDA kernel takes float32, float64, int32 or int64 (atomic adds); convert "
           "it first");
  const int64_t d = wrap_dim(dim, self.dim(), "index_add_");
  const Tensor idx = prepare_index(index, self.size(d), self.device(), "index_add_");
  native::rules::check_index_add_source(self, src, d, idx.numel());
  const Tensor s_src = contiguous(to_dtype(src, self.dtype()));
  const Split s = split_at(self.sizes(), d);
  const int64_t total = s_src.numel();
  if (total == 0) return;
  Tensor bad = bad_flag(self.device());
  dev_dispatch(self.dtype(), "index_add_", [&]<class T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                  std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>) {
      index_add_kernel<T><<<grid_for(total), kThreads, 0, cuda::current_stream(self.device().index)>>>(
          dev_ptr<T>(self), dev_ptr<const T>(s_src), dev_ptr<const int64_t>(idx), s.outer, s.size,
          idx.numel(), s.inner, dev_ptr<int64_t>(bad));
      LS_CUDA_CHECK_LAUNCH();
    }
  });
  if (index.device().is_cuda()) check_bad_index(bad, s.size, "index_add_");
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  LS_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  const Tensor& first = tensors[0];
  const native::rules::CatShape shape = native::rules::cat_shape(
      tensors, dim, [&](const Tensor& t) { check_on_device("cat", first.device(), {&t}); });
  cuda::DeviceGuard guard(first.device());
  const int64_t d = shape.dim;
  Tensor out = native::empty(shape.sizes, shape.dtype, first.device());
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    const int64_t len = t.sizes()[d];
    if (len > 0) copy_(native::narrow(out, d, at, len), t);
    at += len;
  }
  return out;
}

}  // namespace lockstep::cuda_native
