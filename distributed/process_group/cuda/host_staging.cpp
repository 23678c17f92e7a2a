// distributed/process_group/cuda/host_staging.cpp — pinned twins of CUDA tensors for Gloo
// (Note [Gloo with CUDA tensors]).
// Read before: distributed/process_group/cuda/host_staging.h.
#include "distributed/process_group/cuda/host_staging.h"

#include <map>
#include <mutex>

#include "core/cuda/cuda_allocator.h"
#include "core/cuda/cuda_context.h"
#include "core/error.h"

namespace lockstep::distributed::detail {
namespace {

// One stream per device for the copies back (created once, never destroyed:
// Gloo worker threads may use it until the process exits).
cudaStream_t staging_stream(int device) {
  static std::mutex mutex;
  static std::map<int, cudaStream_t> streams;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = streams.find(device);
  if (it != streams.end()) return it->second;
  cuda::DeviceGuard guard(Device::cuda(device));
  cudaStream_t s = nullptr;
  LS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  streams[device] = s;
  return s;
}

}  // namespace

HostStaging::HostStaging(const Tensor& device_tensor, bool copy_in, bool copy_out, const char* collective)
    : device_(device_tensor), copy_in_(copy_in), copy_out_(copy_out) {
  LS_CHECK(device_.defined() && device_.device().is_cuda(), collective, ": HostStaging expects a CUDA tensor");
  LS_CHECK(device_.is_contiguous(), collective, ": the CUDA tensor with shape ", device_.shape_str(),
           " is not contiguous; pass t.contiguous() (and copy the result back if needed)");
  const int dev = device_.device().index;
  cuda::DeviceGuard guard(device_.device());
  const size_t nbytes = device_.nbytes();
  LS_CUDA_CHECK(cudaHostAlloc(&pinned_, nbytes == 0 ? 1 : nbytes, cudaHostAllocDefault));
  auto storage = std::make_shared<StorageImpl>(pinned_, nbytes, Device::cpu());  // not owned: freed below
  host_ = Tensor(std::make_shared<TensorImpl>(storage, device_.sizes(), contiguous_strides(device_.sizes()), 0,
                                              device_.dtype()));
  cudaStream_t compute = cuda::current_stream(dev);
  if (copy_in_ && nbytes > 0) {
    LS_CUDA_CHECK(cudaMemcpyAsync(pinned_, device_.raw_data(), nbytes, cudaMemcpyDeviceToHost, compute));
  }
  LS_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  LS_CUDA_CHECK(cudaEventRecord(ready_, compute));
  if (copy_out_ && nbytes > 0) cuda::record_stream(device_, staging_stream(dev));
}

HostStaging::~HostStaging() {
  // The copy into the twin may still be queued if the collective never ran
  // (a broken group): wait for it, or leak the twin if CUDA itself failed.
  const bool settled = ready_ == nullptr || cudaEventSynchronize(ready_) == cudaSuccess;
  if (ready_ != nullptr) cudaEventDestroy(ready_);
  if (settled && pinned_ != nullptr) cudaFreeHost(pinned_);
}

void HostStaging::before() const {
  if (copy_in_) LS_CUDA_CHECK(cudaEventSynchronize(ready_));
}

void HostStaging::after(const Tensor& part) const {
  if (!copy_out_ || part.nbytes() == 0) return;
  const auto* base = static_cast<const char*>(host_.raw_data());
  const auto* from = static_cast<const char*>(part.raw_data());
  LS_CHECK(from >= base && from + part.nbytes() <= base + host_.nbytes() && part.is_contiguous(),
           "HostStaging::after: the part is not a contiguous view of the host twin");
  const int dev = device_.device().index;
  cuda::DeviceGuard guard(device_.device());
  cudaStream_t s = staging_stream(dev);
  // Writes after whatever the compute stream queued before the collective was issued.
  LS_CUDA_CHECK(cudaStreamWaitEvent(s, ready_, 0));
  LS_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(device_.raw_data()) + (from - base), from, part.nbytes(),
                                cudaMemcpyHostToDevice, s));
  LS_CUDA_CHECK(cudaStreamSynchronize(s));
}

namespace {
std::shared_ptr<StagedTensor> stage(const Tensor& device_tensor, bool copy_in, bool copy_out, const char* collective) {
  return std::make_shared<HostStaging>(device_tensor, copy_in, copy_out, collective);
}

// The static registrar (Note [CUDA hooks] in core/cuda_hooks.h).
const HostStagingHooks staging_hooks{&stage};
const bool staging_hooks_registered = lockstep::detail::register_cuda_hooks(staging_hooks);
}  // namespace

}  // namespace lockstep::distributed::detail
