// core/cuda/memory.cu — device memory ops: empty, fill_, copy_ (within a device,
// between devices, and between host and device), contiguous, clone, to_dtype,
// to_device.
//
// § Note [Host-device copies]
// A copy between host and device goes through a pinned (page-locked) staging
// buffer per device, in chunks of kStagingBytes: the DMA engine can only read
// and write pinned memory, so a pageable buffer would be staged by the driver
// anyway, and with our own buffer the host-to-device copy can return before the
// transfer ends. Host to device: wait for the buffer's previous transfer (an
// event), memcpy the chunk in, cudaMemcpyAsync on the current stream, record
// the event. Device to host: the host reads the result next, so each chunk's
// transfer is waited for (cudaStreamSynchronize, which also orders it after
// every kernel that produced the data) before it is copied out of the buffer.
// Dtype conversion and broadcasting happen on the device for uploads (the raw
// bytes go up, then a device copy_ converts) and on the host for downloads.
// Between two devices the data goes through a peer copy (cudaMemcpyPeerAsync)
// with both streams synchronised around it: slow, but plainly correct.
// Read before: core/cuda/cuda_loops.cuh, core/native/memory.cpp.
// Read next: core/cuda/elementwise.cu.
#include <cstring>
#include <mutex>

#include "core/cuda/cuda_loops.cuh"
#include "core/cuda/cuda_native.h"

namespace lockstep::cuda_native {

namespace detail {

void check_on_device(const char* op, Device device, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    LS_CHECK(t->device() == device, op, ": expected every tensor on ", device.str(),
             " but one of shape ", t->shape_str(), " is on ", t->device().str(),
             "; move it with .to(", device.str(), ") first");
  }
}

}  // namespace detail

using namespace detail;

namespace {

constexpr size_t kStagingBytes = size_t{32} << 20;  // 32 MiB per chunk

// One pinned staging buffer per device; see Note [Host-device copies].
struct Staging {
  std::mutex mutex;
  void* buffer = nullptr;
  cudaEvent_t done = nullptr;  // the last upload out of `buffer`
};

Staging& staging(int device) {
  static auto* all = new Staging[64];  // never destroyed; indexed by device (< 64, see cuda_context)
  Staging& s = all[device];
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.buffer == nullptr) {
    cuda::DeviceGuard guard(Device::cuda(device));
    LS_CUDA_CHECK(cudaHostAlloc(&s.buffer, kStagingBytes, cudaHostAllocDefault));
    LS_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  }
  return s;
}

// nbytes from host memory to device memory, asynchronously on the current stream.
void upload(void* dst, const void* src, size_t nbytes, int device) {
  Staging& s = staging(device);
  std::lock_guard<std::mutex> lock(s.mutex);
  const cudaStream_t stream = cuda::current_stream(device);
  for (size_t done = 0; done < nbytes; done += kStagingBytes) {
    const size_t n = std::min(kStagingBytes, nbytes - done);
    LS_CUDA_CHECK(cudaEventSynchronize(s.done));  // the buffer's previous transfer has ended
    std::memcpy(s.buffer, static_cast<const char*>(src) + done, n);
    LS_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + done, s.buffer, n,
                                  cudaMemcpyHostToDevice, stream));
    LS_CUDA_CHECK(cudaEventRecord(s.done, stream));
  }
}

// nbytes from device memory to host memory; returns when the host has them.
void download(void* dst, const void* src, size_t nbytes, int device) {
  Staging& s = staging(device);
  std::lock_guard<std::mutex> lock(s.mutex);
  const cudaStream_t stream = cuda::current_stream(device);
  LS_CUDA_CHECK(cudaEventSynchronize(s.done));
  for (size_t done = 0; done < nbytes; done += kStagingBytes) {
    const size_t n = std::min(kStagingBytes, nbytes - done);
    LS_CUDA_CHECK(cudaMemcpyAsync(s.buffer, static_cast<const char*>(src) + done, n,
                                  cudaMemcpyDeviceToHost, stream));
    LS_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::memcpy(static_cast<char*>(dst) + done, s.buffer, n);
  }
}

template <class T>
struct FillFn {
  double value;
  __device__ T operator()() const { return convert<T>(value); }
};

template <class D, class S>
struct ConvertFn {
  __device__ D operator()(S v) const { return convert<D>(v); }
};

bool same_layout(const Tensor& dst, const Tensor& src) {
  return dst.dtype() == src.dtype() && dst.sizes() == src.sizes() && dst.is_contiguous() &&
         src.is_contiguous();
}

// dst and src on the same CUDA device.
void copy_on_device(const Tensor& dst, const Tensor& src) {
  const int device = dst.device().index;
  if (same_layout(dst, src)) {
    if (dst.nbytes() > 0 && dst.raw_data() != src.raw_data()) {
      LS_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(),
                                    cudaMemcpyDeviceToDevice, cuda::current_stream(device)));
    }
    return;
  }
  dev_dispatch_all(dst.dtype(), [&]<class D>() {
    dev_dispatch_all(src.dtype(), [&]<class S>() { map1<D, S>(dst, src, ConvertFn<D, S>{}, "copy_"); });
  });
}

}  // namespace

Tensor empty(const IntList& sizes, ScalarType dtype, Device device) {
  return native::empty(sizes, dtype, device);
}

Tensor empty_like(const Tensor& t) { return native::empty(t.sizes(), t.dtype(), t.device()); }

Tensor zeros_like(const Tensor& t) {
  Tensor out = empty_like(t);
  fill_(out, 0.0);
  return out;
}

void fill_(const Tensor& self, double value) {
  cuda::DeviceGuard guard(self.device());
  dev_dispatch_all(self.dtype(), [&]<class T>() { map0<T>(self, FillFn<T>{value}, "fill_"); });
}

void copy_(const Tensor& dst, const Tensor& src) {
  LS_CHECK(dst.defined() && src.defined(), "copy_: got an undefined tensor");
  const IntList shape = broadcast_shapes(dst.sizes(), src.sizes(), "copy_");
  LS_CHECK(shape == dst.sizes(), "copy_: source of shape ", src.shape_str(),
           " cannot be broadcast to destination shape ", dst.shape_str());
  const Device dd = dst.device(), sd = src.device();
  if (dd.is_cuda() && sd.is_cuda()) {
    if (dd == sd) {
      cuda::DeviceGuard guard(dd);
      copy_on_device(dst, src);
      return;
    }
    // Between devices: convert on the source device, peer-copy the bytes, then
    // lay them out on the destination device (Note [Host-device copies]).
    Tensor packed;
    {
      cuda::DeviceGuard guard(sd);
      packed = contiguous(to_dtype(src, dst.dtype()));
    }
    Tensor landed = native::empty(packed.sizes(), packed.dtype(), dd);
    cuda::synchronize(dd.index);  // `landed` may reuse memory that dd's stream still reads
    {
      cuda::DeviceGuard guard(sd);
      if (packed.nbytes() > 0) {
        LS_CUDA_CHECK(cudaMemcpyPeerAsync(landed.raw_data(), dd.index, packed.raw_data(),
                                          sd.index, packed.nbytes(), cuda::current_stream(sd.index)));
      }
      cuda::synchronize(sd.index);
    }
    cuda::DeviceGuard guard(dd);
    copy_on_device(dst, landed);
    return;
  }
  if (dd.is_cuda()) {  // host -> device: raw bytes up, then convert/lay out on the device
    cuda::DeviceGuard guard(dd);
    const Tensor host = native::contiguous(src);
    if (same_layout(dst, host)) {
      upload(dst.raw_data(), host.raw_data(), host.nbytes(), dd.index);
      return;
    }
    Tensor landed = native::empty(host.sizes(), host.dtype(), dd);
    upload(landed.raw_data(), host.raw_data(), host.nbytes(), dd.index);
    copy_on_device(dst, landed);
    return;
  }
  LS_CHECK(sd.is_cuda(), "copy_ (CUDA): neither tensor is on a CUDA device; this is a lockstep bug");
  cuda::DeviceGuard guard(sd);  // device -> host: raw bytes down, then convert on the host
  const Tensor packed = contiguous(src);
  if (same_layout(dst, packed)) {
    download(dst.raw_data(), packed.raw_data(), packed.nbytes(), sd.index);
    return;
  }
  Tensor host = native::empty(packed.sizes(), packed.dtype(), Device::cpu());
  download(host.raw_data(), packed.raw_data(), packed.nbytes(), sd.index);
  native::copy_(dst, host);
}

Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : clone(t); }

Tensor clone(const Tensor& t) {
  Tensor out = empty_like(t);
  copy_(out, t);
  return out;
}

Tensor to_dtype(const Tensor& t, ScalarType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = native::empty(t.sizes(), dtype, t.device());
  copy_(out, t);
  return out;
}

Tensor to_device(const Tensor& t, Device device) {
  LS_CHECK(t.defined(), "to: called on an undefined tensor");
  if (t.device() == device) return t;
  if (device.is_cuda()) cuda::check_device(device, "to");
  Tensor out = native::empty(t.sizes(), t.dtype(), device);
  copy_(out, t);
  return out;
}

}  // namespace lockstep::cuda_native
