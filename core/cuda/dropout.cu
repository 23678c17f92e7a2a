// core/cuda/dropout.cu — inverted dropout on the GPU, with the CPU's masks.
//
// The CPU draws its mask from a counter-based hash (Note [Counter-based dropout
// masks] in core/native/dropout.cpp): ONE 64-bit key per call from the default
// generator, and element i kept iff the top 32 bits of
// splitmix64(key + (i + 1) * golden) are below (1 - p) * 2^32. Nothing in that
// depends on the order elements are visited, so a GPU thread per element
// computes the same bit: for the same generator state the CUDA and CPU ops drop
// the same elements (the tests compare the masks exactly), and a seeded program
// gives the same masks on either device. The key is taken on the host under the
// generator's mutex, exactly as the CPU does, so CPU and CUDA dropout calls draw
// from one stream. Output and gradient are x * mask / (1 - p), zeros when p == 1.
//
// Read before: core/native/dropout.cpp, core/cuda/nn_util.h. Read next: core/cuda/loss.cu.
#include <cmath>
#include <mutex>

#include "core/cuda/cuda_native_nn.h"
#include "core/cuda/nn_util.h"
#include "core/native/native.h"
#include "core/rng.h"

namespace lockstep::cuda_native {

namespace {

using nn_detail::blocks_for;
using nn_detail::kThreads;

void check_p(double p, const char* op) {
  LS_CHECK(p >= 0.0 && p <= 1.0, op, ": dropout probability has to be between 0 and 1, but got ",
           p);
}

// The same function as the CPU's splitmix64 (core/native/dropout.cpp).
__device__ inline uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

template <class T>
__global__ void dropout_forward_kernel(const T* __restrict__ x, T* __restrict__ y,
                                       bool* __restrict__ mask, int64_t n, uint64_t key,
                                       uint64_t threshold, T scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t h = splitmix64(key + static_cast<uint64_t>(i + 1) * 0x9E3779B97F4A7C15ull);
    const bool keep = (h >> 32) < threshold;
    mask[i] = keep;
    y[i] = keep ? x[i] * scale : T(0);
  }
}

template <class T>
__global__ void apply_mask_kernel(const T* __restrict__ x, const bool* __restrict__ mask,
                                  T* __restrict__ y, int64_t n, T scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = mask[i] ? x[i] * scale : T(0);
  }
}

}  // namespace

std::tuple<Tensor, Tensor> dropout_forward(const Tensor& input, double p) {
  const char* op = "dropout";
  LS_CHECK(input.defined(), op, ": input is an undefined tensor");
  check_p(p, op);
  nn_detail::check_on_device(op, input, {});
  if (nn_detail::is_bf16(input)) {  // Note [bf16 nn ops through float32]: the same mask
    auto [out, mask] = dropout_forward(nn_detail::widened(input), p);
    return {nn_detail::to_bf16(out), mask};
  }
  LS_CHECK(input.dtype() == kFloat32 || input.dtype() == kFloat64, op,
           ": expected a float32 or float64 input on CUDA, got ", dtype_name(input.dtype()));
  uint64_t key;
  {
    Generator& gen = default_generator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    key = gen.next_u64();
  }
  const uint64_t threshold = static_cast<uint64_t>(std::ldexp(1.0 - p, 32));
  const Device device = input.device();
  const Tensor x = native::contiguous(input);
  Tensor out = native::empty(x.sizes(), x.dtype(), device);
  Tensor mask = native::empty(x.sizes(), kBool, device);
  const int64_t n = x.numel();
  if (n == 0) return {out, mask};
  const double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    dropout_forward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        x.data_ptr<T>(), out.data_ptr<T>(), mask.data_ptr<bool>(), n, key, threshold,
        static_cast<T>(scale));
    LS_CUDA_CHECK_LAUNCH();
  });
  return {out, mask};
}

Tensor dropout_backward(const Tensor& grad_output, const Tensor& mask, double p) {
  const char* op = "dropout_backward";
  LS_CHECK(grad_output.defined() && mask.defined(), op, ": grad_output and mask must be defined");
  check_p(p, op);
  nn_detail::check_on_device(op, grad_output, {mask});
  LS_CHECK(mask.dtype() == kBool && mask.sizes() == grad_output.sizes(), op, ": mask ",
           mask.shape_str(), " (", dtype_name(mask.dtype()), ") must be a bool tensor of shape ",
           grad_output.shape_str());
  if (nn_detail::is_bf16(grad_output)) {  // Note [bf16 nn ops through float32]
    return nn_detail::to_bf16(dropout_backward(nn_detail::widened(grad_output), mask, p));
  }
  LS_CHECK(grad_output.dtype() == kFloat32 || grad_output.dtype() == kFloat64, op,
           ": expected a float32 or float64 grad_output on CUDA, got ",
           dtype_name(grad_output.dtype()));
  const Device device = grad_output.device();
  const Tensor g = native::contiguous(grad_output), keep = native::contiguous(mask);
  Tensor out = native::empty(g.sizes(), g.dtype(), device);
  const int64_t n = g.numel();
  if (n == 0) return out;
  const double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  dispatch_floating(g.dtype(), op, [&]<class T>() {
    apply_mask_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        g.data_ptr<T>(), keep.data_ptr<bool>(), out.data_ptr<T>(), n, static_cast<T>(scale));
    LS_CUDA_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace lockstep::cuda_native
