// core/cuda/pool.cu — max_pool2d and adaptive_avg_pool2d on the GPU, forward and
// backward, with the CPU kernels' semantics (core/native/pool.cpp).
//
// Hand kernels rather than cuDNN pooling: max_pool2d must return PyTorch's int64
// indices (the flat position h * W + w of each maximum in its plane), which the
// backward takes, and cuDNN's pooling returns none; adaptive windows (which may
// overlap and differ in size) are not a cuDNN pooling mode.
//   max_pool2d forward    one thread per output: the window's first maximum in
//                         row-major order, or its last NaN (`v > best || v is
//                         NaN`), exactly the CPU's rule, so values AND indices match
//   max_pool2d backward   one thread per grad_output element, atomicAdd into
//                         grad_input at its index (overlapping windows, as 3x3
//                         stride 2, may share a maximum); the sum order of such
//                         collisions is not fixed, like PyTorch's CUDA kernel
//   adaptive forward      one thread per output, the window mean summed in double
//   adaptive backward     one thread per INPUT element, which gathers share =
//                         g / area from every output window containing it: no
//                         atomics, deterministic. Output rows oy whose window
//                         [floor(oy H / oh), ceil((oy + 1) H / oh)) contains iy are
//                         exactly [floor(iy oh / H), ceil((iy + 1) oh / H)).
//
// Read before: core/native/pool.cpp, core/cuda/nn_util.h. Read next: core/cuda/batch_norm.cu.
#include <cmath>
#include <string>

#include "core/cuda/cuda_native_nn.h"
#include "core/cuda/nn_util.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/native/pool_rules.h"
#include "core/shape.h"

namespace lockstep::cuda_native {

namespace {

using nn_detail::blocks_for;
using nn_detail::kThreads;

void check_image(const Tensor& input, const char* op) {
  native::rules::check_image(input, op, [&] { nn_detail::check_on_device(op, input, {}); });
}

using PoolGeom = native::rules::PoolWindow;

// y, idx (planes, oh, ow) from x (planes, h, w).
template <class T>
__global__ void max_pool_forward_kernel(const T* __restrict__ x, T* __restrict__ y,
                                        int64_t* __restrict__ idx, int64_t total, PoolGeom p) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ox = i % p.ow;
    const int64_t oy = (i / p.ow) % p.oh;
    const int64_t plane = i / (p.ow * p.oh);
    const T* src = x + plane * p.h * p.w;
    const int64_t y0 = max(oy * p.sh - p.ph, int64_t(0));
    const int64_t y1 = min(oy * p.sh - p.ph + p.kh, p.h);
    const int64_t x0 = max(ox * p.sw - p.pw, int64_t(0));
    const int64_t x1 = min(ox * p.sw - p.pw + p.kw, p.w);
    T best = -INFINITY;
    int64_t at = y0 * p.w + x0;
    for (int64_t iy = y0; iy < y1; ++iy) {
      for (int64_t ix = x0; ix < x1; ++ix) {
        const T v = src[iy * p.w + ix];
        if (v > best || v != v) {  // NaN propagates (the last one wins), as the CPU
          best = v;
          at = iy * p.w + ix;
        }
      }
    }
    y[i] = best;
    idx[i] = at;
  }
}

// grad_input (planes, hw) += grad_output (planes, ohw) at the indices.
template <class T>
__global__ void max_pool_backward_kernel(const T* __restrict__ gy, const int64_t* __restrict__ idx,
                                         T* __restrict__ gx, int64_t total, int64_t ohw,
                                         int64_t hw) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t plane = i / ohw;
    const int64_t at = idx[i];
    if (at >= 0 && at < hw) atomicAdd(gx + plane * hw + at, gy[i]);
  }
}

__device__ inline int64_t window_start(int64_t i, int64_t in, int64_t out) { return i * in / out; }
__device__ inline int64_t window_end(int64_t i, int64_t in, int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

template <class T>
__global__ void adaptive_avg_forward_kernel(const T* __restrict__ x, T* __restrict__ y,
                                            int64_t total, int64_t h, int64_t w, int64_t oh,
                                            int64_t ow) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ox = i % ow;
    const int64_t oy = (i / ow) % oh;
    const int64_t plane = i / (ow * oh);
    const T* src = x + plane * h * w;
    const int64_t y0 = window_start(oy, h, oh), y1 = window_end(oy, h, oh);
    const int64_t x0 = window_start(ox, w, ow), x1 = window_end(ox, w, ow);
    double s = 0;
    for (int64_t iy = y0; iy < y1; ++iy) {
      for (int64_t ix = x0; ix < x1; ++ix) s += static_cast<double>(src[iy * w + ix]);
    }
    y[i] = static_cast<T>(s / static_cast<double>((y1 - y0) * (x1 - x0)));
  }
}

template <class T>
__global__ void adaptive_avg_backward_kernel(const T* __restrict__ gy, T* __restrict__ gx,
                                             int64_t total, int64_t h, int64_t w, int64_t oh,
                                             int64_t ow) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ix = i % w;
    const int64_t iy = (i / w) % h;
    const int64_t plane = i / (w * h);
    const T* src = gy + plane * oh * ow;
    const int64_t oy0 = iy * oh / h, oy1 = ((iy + 1) * oh + h - 1) / h;
    const int64_t ox0 = ix * ow / w, ox1 = ((ix + 1) * ow + w - 1) / w;
    T acc = T(0);
    for (int64_t oy = oy0; oy < oy1 && oy < oh; ++oy) {
      const int64_t y0 = window_start(oy, h, oh), y1 = window_end(oy, h, oh);
      if (iy < y0 || iy >= y1) continue;  // never taken; kept as the definition
      for (int64_t ox = ox0; ox < ox1 && ox < ow; ++ox) {
        const int64_t x0 = window_start(ox, w, ow), x1 = window_end(ox, w, ow);
        if (ix < x0 || ix >= x1) continue;
        acc += src[oy * ow + ox] / static_cast<T>((y1 - y0) * (x1 - x0));
      }
    }
    gx[i] = acc;
  }
}

}  // namespace

std::tuple<Tensor, Tensor> max_pool2d_forward(const Tensor& input, const IntList& kernel_size,
                                              const IntList& stride, const IntList& padding) {
  const char* op = "max_pool2d";
  check_image(input, op);
  if (nn_detail::is_bf16(input)) {  // Note [bf16 nn ops through float32]: the max is exact
    auto [out, indices] =
        max_pool2d_forward(nn_detail::widened(input), kernel_size, stride, padding);
    return {nn_detail::to_bf16(out), indices};
  }
  const PoolGeom geom = native::rules::max_pool2d_window(input, kernel_size, stride, padding, op);
  const int64_t n = input.size(0), c = input.size(1), oh = geom.oh, ow = geom.ow;
  const Device device = input.device();
  const Tensor x = native::contiguous(input);
  Tensor out = native::empty({n, c, oh, ow}, x.dtype(), device);  // (N, C, oH, oW)
  Tensor indices = native::empty({n, c, oh, ow}, kInt64, device);
  const int64_t total = out.numel();
  if (total == 0) return {out, indices};
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    max_pool_forward_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
        x.data_ptr<T>(), out.data_ptr<T>(), indices.data_ptr<int64_t>(), total, geom);
    LS_CUDA_CHECK_LAUNCH();
  });
  return {out, indices};
}

// `tile` is the CPU's hint for channels-last bf16 gradients; here every gradient scatters.
Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices,
                           const IntList& input_sizes, const IntList& /*tile*/) {
  const char* op = "max_pool2d_backward";
  check_image(grad_output, op);
  if (nn_detail::is_bf16(grad_output)) {  // Note [bf16 nn ops through float32]
    return nn_detail::to_bf16(
        max_pool2d_backward(nn_detail::widened(grad_output), indices, input_sizes));
  }
  native::rules::check_max_pool_indices(indices, grad_output, op);
  nn_detail::check_on_device(op, grad_output, {indices});
  native::rules::check_pool_input_sizes(input_sizes, grad_output, op);
  const Device device = grad_output.device();
  const Tensor gy = native::contiguous(grad_output), idx = native::contiguous(indices);
  Tensor grad_input = nn_detail::zeros_on(input_sizes, gy.dtype(), device);  // (N, C, H, W)
  const int64_t total = gy.numel();
  if (total == 0) return grad_input;
  const int64_t hw = input_sizes[2] * input_sizes[3];
  const int64_t ohw = gy.size(2) * gy.size(3);
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  dispatch_floating(gy.dtype(), op, [&]<class T>() {
    max_pool_backward_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
        gy.data_ptr<T>(), idx.data_ptr<int64_t>(), grad_input.data_ptr<T>(), total, ohw, hw);
    LS_CUDA_CHECK_LAUNCH();
  });
  return grad_input;
}

Tensor adaptive_avg_pool2d_forward(const Tensor& input, const IntList& output_size) {
  const char* op = "adaptive_avg_pool2d";
  check_image(input, op);
  if (nn_detail::is_bf16(input)) {  // Note [bf16 nn ops through float32]
    return nn_detail::to_bf16(adaptive_avg_pool2d_forward(nn_detail::widened(input), output_size));
  }
  const auto [oh, ow] = native::rules::adaptive_output_size(output_size, op);
  const int64_t n = input.size(0), c = input.size(1), h = input.size(2), w = input.size(3);
  LS_CHECK(h > 0 && w > 0, op, ": input ", input.shape_str(), " has an empty plane");
  const Device device = input.device();
  const Tensor x = native::contiguous(input);
  Tensor out = native::empty({n, c, oh, ow}, x.dtype(), device);  // (N, C, oh, ow)
  const int64_t total = out.numel();
  if (total == 0) return out;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    adaptive_avg_forward_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
        x.data_ptr<T>(), out.data_ptr<T>(), total, h, w, oh, ow);
    LS_CUDA_CHECK_LAUNCH();
  });
  return out;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const IntList& input_sizes) {
  const char* op = "adaptive_avg_pool2d_backward";
  check_image(grad_output, op);
  if (nn_detail::is_bf16(grad_output)) {  // Note [bf16 nn ops through float32]
    return nn_detail::to_bf16(
        adaptive_avg_pool2d_backward(nn_detail::widened(grad_output), input_sizes));
  }
  native::rules::check_pool_input_sizes(input_sizes, grad_output, op);
  const Device device = grad_output.device();
  const Tensor gy = native::contiguous(grad_output);
  const int64_t h = input_sizes[2], w = input_sizes[3];
  const int64_t oh = gy.size(2), ow = gy.size(3);
  Tensor grad_input = native::empty(input_sizes, gy.dtype(), device);  // (N, C, H, W)
  const int64_t total = grad_input.numel();
  if (total == 0) return grad_input;
  LS_CHECK(oh > 0 && ow > 0, op, ": grad_output ", grad_output.shape_str(), " has an empty plane");
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  dispatch_floating(gy.dtype(), op, [&]<class T>() {
    adaptive_avg_backward_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
        gy.data_ptr<T>(), grad_input.data_ptr<T>(), total, h, w, oh, ow);
    LS_CUDA_CHECK_LAUNCH();
  });
  return grad_input;
}

}  // namespace lockstep::cuda_native
