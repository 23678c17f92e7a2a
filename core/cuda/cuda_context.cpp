// core/cuda/cuda_context.cpp — the CUDA backend's runtime state: device
// selection, the per-device compute streams, the thread-local stream override
// behind CUDAStreamGuard, the per-device cuBLAS/cuDNN handles, and the CUDA runtime
// hooks it registers for core (device count, synchronize, the caching allocator; Note
// [CUDA hooks] in core/cuda_hooks.h), through which ls::cuda::device_count() answers.
//
// § Note [CUDA streams and handles]
// Each device gets one compute stream, created on first use with
// cudaStreamNonBlocking so it never serialises with the legacy default stream
// (which third-party code may use). A thread may override it for one device
// with CUDAStreamGuard (ProcessGroupNCCL runs its collectives on its own
// stream); the override is thread-local, so other threads keep the compute
// stream. The cuBLAS/cuDNN handles are per device and shared by threads; they
// are rebound to the caller's current stream every time they are handed out
// (cublasSetStream/cudnnSetStream are cheap), so a library call always lands on
// the stream the caller's kernels use. The streams and handles live until the
// process exits (destroying them at exit could race with the driver's teardown).
// Read before: core/cuda/cuda_context.h. Read next: core/cuda/cuda_allocator.h.
#include "core/cuda/cuda_context.h"

#include <cudnn.h>

#include <array>
#include <mutex>

#include "core/cuda/cublas_library.h"
#include "core/cuda/cuda_allocator.h"
#include "core/cuda_hooks.h"

namespace lockstep::cuda {

namespace {

constexpr int kMaxDevices = 64;

struct DeviceState {
  std::once_flag stream_once;
  cudaStream_t compute_stream = nullptr;
  std::once_flag cublas_once;
  cublasHandle_t cublas = nullptr;
  std::once_flag cudnn_once;
  cudnnHandle_t cudnn = nullptr;
  std::mutex handle_mutex;  // serialises set-stream-and-return of the shared handles
};

std::array<DeviceState, kMaxDevices>& states() {
  static auto* s = new std::array<DeviceState, kMaxDevices>();  // never destroyed (see Note)
  return *s;
}

// The thread's stream override per device (nullptr: the compute stream).
thread_local std::array<cudaStream_t, kMaxDevices> tls_stream{};
thread_local std::array<bool, kMaxDevices> tls_has_stream{};

void check_index(int device, const char* op) {
  const int n = device_count();
  LS_CHECK(n > 0, op, ": no CUDA device is available (ls::cuda::device_count() == 0); run on a "
                      "machine with an NVIDIA GPU and driver, or use ls::Device::cpu()");
  LS_CHECK(device >= 0 && device < n && device < kMaxDevices, op, ": CUDA device index ", device,
           " is out of range: this machine has ", n, " CUDA device(s) (cuda:0 .. cuda:", n - 1,
           ")");
}

}  // namespace

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();  // clear a sticky-free error so later calls start clean
  throw Error(detail::str("CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
                          ") from `", expr, "` at ", file, ":", line,
                          "; if it is an out-of-memory error reduce the batch size, if it is a "
                          "launch error check the GPU architecture (built for sm_90)"));
}

namespace {
// Asked once: the answer cannot change during the process, and cudaGetDeviceCount
// without a driver returns an error, which means "no device" here, not a failure.
int runtime_device_count() {
  static const int count = [] {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

Allocator& runtime_allocator() { return caching_allocator(); }

// The static registrar (Note [CUDA hooks]): core's CUDA runtime hooks, set as this library loads.
const CudaRuntimeHooks runtime_hooks{&runtime_device_count, &synchronize, &runtime_allocator};
const bool runtime_hooks_registered = lockstep::detail::register_cuda_hooks(runtime_hooks);
}  // namespace

int current_device() {
  int d = 0;
  LS_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int index) {
  check_index(index, "set_device");
  LS_CUDA_CHECK(cudaSetDevice(index));
}

void check_device(Device device, const char* op) {
  LS_CHECK(device.is_cuda(), op, ": expected a CUDA device but got ", device.str());
  check_index(device.index, op);
}

cudaStream_t current_stream(int device) {
  check_index(device, "current_stream");
  if (tls_has_stream[device]) return tls_stream[device];
  DeviceState& s = states()[device];
  std::call_once(s.stream_once, [&] {
    int previous = current_device();
    LS_CUDA_CHECK(cudaSetDevice(device));
    LS_CUDA_CHECK(cudaStreamCreateWithFlags(&s.compute_stream, cudaStreamNonBlocking));
    LS_CUDA_CHECK(cudaSetDevice(previous));
  });
  return s.compute_stream;
}

CUDAStreamGuard::CUDAStreamGuard(int device, cudaStream_t stream)
    : device_(device), previous_device_(current_device()) {
  check_index(device, "CUDAStreamGuard");
  previous_stream_ = tls_stream[device];
  previous_override_ = tls_has_stream[device];
  LS_CUDA_CHECK(cudaSetDevice(device));
  tls_stream[device] = stream;
  tls_has_stream[device] = true;
}

CUDAStreamGuard::~CUDAStreamGuard() {
  tls_stream[device_] = previous_stream_;
  tls_has_stream[device_] = previous_override_;
  (void)cudaSetDevice(previous_device_);  // a destructor must not throw
}

DeviceGuard::DeviceGuard(Device device) {
  if (!device.is_cuda()) return;
  check_index(device.index, "DeviceGuard");
  previous_ = current_device();
  if (previous_ != device.index) LS_CUDA_CHECK(cudaSetDevice(device.index));
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

namespace {
void check_cublas(cublasStatus_t st, const char* what, int device) {
  LS_CHECK(st == CUBLAS_STATUS_SUCCESS, what, " failed on cuda:", device, " with cuBLAS status ",
           static_cast<int>(st), " (", cublas_library().status_string(st),
           "); check that the CUDA driver works (nvidia-smi) and the GPU has free memory");
}
void check_cudnn(cudnnStatus_t st, const char* what, int device) {
  LS_CHECK(st == CUDNN_STATUS_SUCCESS, what, " failed on cuda:", device, " with cuDNN status ",
           static_cast<int>(st), " (", cudnnGetErrorString(st),
           "); check that cuDNN 9 matches the CUDA driver and the GPU has free memory");
}
}  // namespace

cublasContext* cublas_handle(int device) {
  const cudaStream_t stream = current_stream(device);
  DeviceState& s = states()[device];
  std::call_once(s.cublas_once, [&] {
    DeviceGuard guard(Device::cuda(device));
    check_cublas(cublas_library().create(&s.cublas), "cublasCreate", device);
  });
  std::lock_guard<std::mutex> lock(s.handle_mutex);
  check_cublas(cublas_library().set_stream(s.cublas, stream), "cublasSetStream", device);
  return s.cublas;
}

cudnnContext* cudnn_handle(int device) {
  const cudaStream_t stream = current_stream(device);
  DeviceState& s = states()[device];
  std::call_once(s.cudnn_once, [&] {
    DeviceGuard guard(Device::cuda(device));
    check_cudnn(cudnnCreate(&s.cudnn), "cudnnCreate", device);
  });
  std::lock_guard<std::mutex> lock(s.handle_mutex);
  check_cudnn(cudnnSetStream(s.cudnn, stream), "cudnnSetStream", device);
  return s.cudnn;
}

void synchronize(int device) {
  DeviceGuard guard(Device::cuda(device));
  LS_CUDA_CHECK(cudaStreamSynchronize(current_stream(device)));
}

}  // namespace lockstep::cuda
