// core/cuda/fused_relu.cu — add_relu on the GPU: max(a + b, 0) in one pass, the
// residual add and ReLU at the end of every ResNet block (core/native/fused_relu.h).
// The fused batch_norm_relu lives with batch norm, in core/cuda/batch_norm.cu.
// Read before: core/native/fused_relu.h, core/cuda/nn_util.h. Read next:
// core/cuda/optim_kernels.cu.
#include "core/cuda/cuda_native_nn.h"
#include "core/cuda/nn_util.h"
#include "core/native/native.h"

namespace lockstep::cuda_native {

namespace {

template <class T>
__global__ void add_relu_kernel(const T* __restrict__ a, const T* __restrict__ b,
                                T* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T v = a[i] + b[i];
    out[i] = v > T(0) ? v : T(0);
  }
}

}  // namespace

Tensor add_relu(const Tensor& a, const Tensor& b) {
  const char* op = "add_relu";
  LS_CHECK(a.defined() && b.defined(), op, ": got an undefined tensor");
  nn_detail::check_on_device(op, a, {b});
  LS_CHECK(a.sizes() == b.sizes() && a.dtype() == b.dtype(), op,
           ": expected two tensors of the same shape and dtype but got ", a.dtype(), " ",
           a.shape_str(), " and ", b.dtype(), " ", b.shape_str(),
           "; for broadcasting or mixed dtypes use (a + b).relu()");
  if (nn_detail::is_bf16(a)) {  // Note [bf16 nn ops through float32]
    return nn_detail::to_bf16(add_relu(nn_detail::widened(a), nn_detail::widened(b)));
  }
  LS_CHECK(a.dtype() == kFloat32 || a.dtype() == kFloat64, op,
           ": expected float32 or float64 tensors on CUDA but got ", a.dtype());
  const Device device = a.device();
  const Tensor x = native::contiguous(a), y = native::contiguous(b);
  Tensor out = native::empty(a.sizes(), a.dtype(), device);  // a's shape, contiguous
  const int64_t n = out.numel();
  if (n == 0) return out;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  dispatch_floating(a.dtype(), op, [&]<class T>() {
    add_relu_kernel<T><<<nn_detail::blocks_for(n), nn_detail::kThreads, 0, stream>>>(
        x.data_ptr<T>(), y.data_ptr<T>(), out.data_ptr<T>(), n);
    LS_CUDA_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace lockstep::cuda_native
