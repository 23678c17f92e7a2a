// core/cuda/softmax.cu — softmax, log_softmax and their backward on a CUDA
// device, over any dim. The formulas are the CPU kernels' (core/native/softmax.cpp):
//   softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m),   m = max_j x_j
//   log_softmax(x)_i = (x_i - m) - log(sum_j exp(x_j - m))
//   backward: softmax dx = y * (g - sum_j g_j y_j); log_softmax dx = g - exp(y) * sum_j g_j
// Sums accumulate in double. The input is viewed as a contiguous (A, R, B)
// array with R the normalised dim: when B == 1 (the last dim: logits,
// attention scores) one block of 256 threads handles a row, with reductions in
// shared memory; otherwise one thread per (a, b) walks its R strided elements.
// Read before: core/cuda/reduce.cu. Read next: core/cuda/index.cu.
#include "core/cuda/cuda_loops.cuh"
#include "core/cuda/cuda_native.h"
#include "core/native/reduce_rules.h"

namespace lockstep::cuda_native {

using namespace detail;

using native::rules::check_defined;
using native::rules::check_softmax_backward;

namespace {

// The block-wide sum / max of each thread's v (every thread gets the result).
__device__ double block_sum(double v, double* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) scratch[threadIdx.x] += scratch[threadIdx.x + s];
    __syncthreads();
  }
  const double total = scratch[0];
  __syncthreads();
  return total;
}

__device__ double block_max(double v, double* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) {
      const double o = scratch[threadIdx.x + s];
      scratch[threadIdx.x] = o > scratch[threadIdx.x] ? o : scratch[threadIdx.x];
    }
    __syncthreads();
  }
  const double m = scratch[0];
  __syncthreads();
  return m;
}

// Forward, B == 1: one block per row of length R.
template <class T>
__global__ void softmax_rows_kernel(const T* x, T* y, int64_t A, int64_t R, bool log) {
  __shared__ double scratch[kThreads];
  for (int64_t a = blockIdx.x; a < A; a += gridDim.x) {
    const T* xr = x + a * R;
    T* yr = y + a * R;
    T m = -INFINITY;  // NaN is skipped here but makes the row NaN below, as on the CPU
    for (int64_t i = threadIdx.x; i < R; i += blockDim.x) m = xr[i] > m ? xr[i] : m;
    m = static_cast<T>(block_max(static_cast<double>(m), scratch));
    double s = 0;
    for (int64_t i = threadIdx.x; i < R; i += blockDim.x) s += exp(xr[i] - m);
    s = block_sum(s, scratch);
    if (log) {
      const T log_s = static_cast<T>(::log(s));
      for (int64_t i = threadIdx.x; i < R; i += blockDim.x) yr[i] = (xr[i] - m) - log_s;
    } else {
      const T inv = static_cast<T>(1.0 / s);
      for (int64_t i = threadIdx.x; i < R; i += blockDim.x) yr[i] = exp(xr[i] - m) * inv;
    }
  }
}

// Forward, B > 1: one thread per (a, b), stepping by B along the row.
template <class T>
__global__ void softmax_cols_kernel(const T* x, T* y, int64_t A, int64_t R, int64_t B, bool log) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < A * B;
       j += int64_t{gridDim.x} * blockDim.x) {
    const int64_t a = j / B, b = j % B;
    const T* xr = x + a * R * B + b;
    T* yr = y + a * R * B + b;
    T m = -INFINITY;
    for (int64_t i = 0; i < R; ++i) m = xr[i * B] > m ? xr[i * B] : m;
    double s = 0;
    for (int64_t i = 0; i < R; ++i) s += exp(xr[i * B] - m);
    if (log) {
      const T log_s = static_cast<T>(::log(s));
      for (int64_t i = 0; i < R; ++i) yr[i * B] = (xr[i * B] - m) - log_s;
    } else {
      const T inv = static_cast<T>(1.0 / s);
      for (int64_t i = 0; i < R; ++i) yr[i * B] = exp(xr[i * B] - m) * inv;
    }
  }
}

// Backward, B == 1.
template <class T>
__global__ void softmax_backward_rows_kernel(const T* g, const T* y, T* gi, int64_t A, int64_t R,
                                             bool log) {
  __shared__ double scratch[kThreads];
  for (int64_t a = blockIdx.x; a < A; a += gridDim.x) {
    const T* gr = g + a * R;
    const T* yr = y + a * R;
    T* out = gi + a * R;
    double s = 0;
    for (int64_t i = threadIdx.x; i < R; i += blockDim.x) {
      s += log ? static_cast<double>(gr[i]) : static_cast<double>(gr[i]) * yr[i];
    }
    const T total = static_cast<T>(block_sum(s, scratch));
    for (int64_t i = threadIdx.x; i < R; i += blockDim.x) {
      out[i] = log ? gr[i] - exp(yr[i]) * total : yr[i] * (gr[i] - total);
    }
  }
}

// Backward, B > 1.
template <class T>
__global__ void softmax_backward_cols_kernel(const T* g, const T* y, T* gi, int64_t A, int64_t R,
                                             int64_t B, bool log) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < A * B;
       j += int64_t{gridDim.x} * blockDim.x) {
    const int64_t a = j / B, b = j % B;
    const int64_t base = a * R * B + b;
    double s = 0;
    for (int64_t i = 0; i < R; ++i) {
      const int64_t k = base + i * B;
      s += log ? static_cast<double>(g[k]) : static_cast<double>(g[k]) * y[k];
    }
    const T total = static_cast<T>(s);
    for (int64_t i = 0; i < R; ++i) {
      const int64_t k = base + i * B;
      gi[k] = log ? g[k] - exp(y[k]) * total : y[k] * (g[k] - total);
    }
  }
}

// (A, R, B) of t for dim d (a 0-d tensor is one row of one element).
void split_at(const Tensor& t, int64_t d, int64_t& A, int64_t& R, int64_t& B) {
  A = 1, R = t.dim() == 0 ? 1 : t.size(d), B = 1;
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (i < d) A *= t.size(i);
    if (i > d) B *= t.size(i);
  }
}

Tensor softmax_impl(const Tensor& t, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  check_defined(t, op);
  cuda::DeviceGuard guard(t.device());
  const int64_t d = wrap_dim(dim, t.dim(), op);
  const Tensor x = contiguous(t);
  Tensor y = native::empty(x.sizes(), x.dtype(), x.device());
  int64_t A, R, B;
  split_at(x, d, A, R, B);
  if (A * R * B == 0) return y;
  const cudaStream_t stream = cuda::current_stream(t.device().index);
  dev_dispatch_floating(x.dtype(), op, [&]<class T>() {
    if (B == 1) {
      softmax_rows_kernel<T><<<grid_for(A * kThreads), kThreads, 0, stream>>>(
          dev_ptr<const T>(x), dev_ptr<T>(y), A, R, log);
    } else {
      softmax_cols_kernel<T><<<grid_for(A * B), kThreads, 0, stream>>>(
          dev_ptr<const T>(x), dev_ptr<T>(y), A, R, B, log);
    }
    LS_CUDA_CHECK_LAUNCH();
  });
  return y;
}

Tensor softmax_backward_impl(const Tensor& grad_output, const Tensor& output, int64_t dim,
                             bool log) {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  check_softmax_backward(grad_output, output, op, [&] {
    check_on_device(op, output.device(), {&grad_output, &output});
  });
  cuda::DeviceGuard guard(output.device());
  LS_CHECK(grad_output.dtype() == output.dtype(), op, ": grad_output has dtype ",
           grad_output.dtype(), " but output has dtype ", output.dtype(), "; they must match");
  const int64_t d = wrap_dim(dim, output.dim(), op);
  const Tensor g = contiguous(grad_output);
  const Tensor y = contiguous(output);
  Tensor gi = native::empty(y.sizes(), y.dtype(), y.device());
  int64_t A, R, B;
  split_at(y, d, A, R, B);
  if (A * R * B == 0) return gi;
  const cudaStream_t stream = cuda::current_stream(output.device().index);
  dev_dispatch_floating(y.dtype(), op, [&]<class T>() {
    if (B == 1) {
      softmax_backward_rows_kernel<T><<<grid_for(A * kThreads), kThreads, 0, stream>>>(
          dev_ptr<const T>(g), dev_ptr<const T>(y), dev_ptr<T>(gi), A, R, log);
    } else {
      softmax_backward_cols_kernel<T><<<grid_for(A * B), kThreads, 0, stream>>>(
          dev_ptr<const T>(g), dev_ptr<const T>(y), dev_ptr<T>(gi), A, R, B, log);
    }
    LS_CUDA_CHECK_LAUNCH();
  });
  return gi;
}

}  // namespace

Tensor softmax(const Tensor& t, int64_t dim) { return softmax_impl(t, dim, false); }
Tensor log_softmax(const Tensor& t, int64_t dim) { return softmax_impl(t, dim, true); }

Tensor softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  return softmax_backward_impl(grad_output, output, dim, false);
}

Tensor log_softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  return softmax_backward_impl(grad_output, output, dim, true);
}

}  // namespace lockstep::cuda_native
