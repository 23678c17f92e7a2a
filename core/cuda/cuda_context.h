// core/cuda/cuda_context.h — the CUDA backend's per-thread and per-device state:
// the current device, the current (compute) stream, the cuBLAS and cuDNN
// handles, and LS_CUDA_CHECK, which turns a CUDA error into an ls::Error.
//
// Compiled only when LOCKSTEP_WITH_CUDA (Note [CUDA build]). Every CUDA kernel
// and library call in lockstep runs on current_stream(device): ops never
// synchronise the host, so a step's kernels queue back to back. Code that needs
// another stream (ProcessGroupNCCL's communication stream) switches with
// CUDAStreamGuard and orders itself against the compute stream with events
// (Note [NCCL stream isolation] in distributed/process_group/cuda/process_group_nccl.h).
// Read before: core/device.h, cmake/LockstepCuda.cmake.
// Read next: core/cuda/cuda_allocator.h, core/native/cuda_dispatch.h.
#pragma once

#include <cuda_runtime.h>

#include "core/device.h"
#include "core/error.h"

// Throws ls::Error naming the call, the CUDA error and where it happened.
#define LS_CUDA_CHECK(expr)                                                            \
  do {                                                                                 \
    cudaError_t ls_cuda_err_ = (expr);                                                 \
    if (ls_cuda_err_ != cudaSuccess) {                                                 \
      ::lockstep::cuda::throw_cuda_error(ls_cuda_err_, #expr, __FILE__, __LINE__);     \
    }                                                                                  \
  } while (0)

// A kernel launch's error (bad configuration, no kernel image for this GPU).
#define LS_CUDA_CHECK_LAUNCH() LS_CUDA_CHECK(cudaGetLastError())

struct cublasContext;
struct cudnnContext;

namespace lockstep::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);

// The device this thread's CUDA calls go to (cudaSetDevice / cudaGetDevice).
int current_device();
void set_device(int index);
// Throws unless `device` is a CUDA device that exists, naming `op`.
void check_device(Device device, const char* op);

// The stream kernels for `device` are queued on, for this thread: the device's
// compute stream (created once per device, non-blocking w.r.t. the legacy
// default stream) unless a CUDAStreamGuard is active.
cudaStream_t current_stream(int device);
inline cudaStream_t current_stream() { return current_stream(current_device()); }

// Makes `stream` the current stream for `device` on this thread, and that
// device current, until destroyed.
class CUDAStreamGuard {
 public:
  CUDAStreamGuard(int device, cudaStream_t stream);
  ~CUDAStreamGuard();
  CUDAStreamGuard(const CUDAStreamGuard&) = delete;
  CUDAStreamGuard& operator=(const CUDAStreamGuard&) = delete;

 private:
  int device_;
  int previous_device_;
  cudaStream_t previous_stream_;
  bool previous_override_ = false;  // whether an outer guard had set previous_stream_
};

// Makes `index` the current device until destroyed (no-op for the CPU).
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Per-device library handles, created on first use and bound to the calling
// thread's current stream for `device` before they are returned.
cublasContext* cublas_handle(int device);
cudnnContext* cudnn_handle(int device);

// Waits for every kernel queued on `device`'s current stream (tests, timing).
void synchronize(int device);

}  // namespace lockstep::cuda
