// core/cuda/layer_norm.cu — layer normalisation on the GPU, forward and backward,
// with the CPU kernels' math (core/native/layer_norm.cpp).
//
// The input (*, normalized_shape) is M rows of D contiguous values.
//   forward       one block per row (grid-stride over rows): the mean, then the
//                 sum of squared deviations from it — two passes, in double, as
//                 the CPU (no cancellation when |mean| >> std) — then
//                 y = (x - mean) * rstd * w + b with mean and rstd rounded to T
//                 first, the CPU's exact expression
//   grad_input    one block per row: sum(gy) and sum(gy * xhat), gy = g * w, then
//                 dx = rstd * (gy - mean(gy) - xhat * mean(gy * xhat))
//   grad_weight,  column sums over the rows of g * xhat and g, in double, split over
//   grad_bias     rows and columns (Note [CUDA column sums]; deterministic)
// Sums use the fixed-tree block_sum2 (core/cuda/nn_reduce.cuh).
//
// Read before: core/native/layer_norm.cpp, core/cuda/nn_reduce.cuh.
// Read next: core/cuda/embedding.cu.
#include <algorithm>
#include <cmath>

#include "core/cuda/cuda_native_nn.h"
#include "core/cuda/nn_reduce.cuh"
#include "core/cuda/nn_util.h"
#include "core/native/layer_norm_rules.h"
#include "core/native/native.h"
#include "core/shape.h"

namespace lockstep::cuda_native {

using native::rules::num_rows;
using native::rules::row_length;

namespace {

using nn_detail::block_sum2;
using nn_detail::blocks_for;
using nn_detail::kThreads;

void check_layer_norm(const Tensor& input, const IntList& normalized_shape, const Tensor& weight,
                      const Tensor& bias, const char* op) {
  native::rules::check_layer_norm(input, normalized_shape, weight, bias, op, [&] {
    nn_detail::check_on_device(op, input, {weight, bias});
    LS_CHECK(input.dtype() == kFloat32 || input.dtype() == kFloat64, op,
             ": expected a float32 or float64 input but got ", dtype_name(input.dtype()));
  });
}

// Grid size for one block per row.
unsigned int row_blocks(int64_t m) {
  return static_cast<unsigned int>(std::clamp<int64_t>(m, 1, 65535));
}

template <class T>
__global__ void forward_kernel(const T* __restrict__ x, const T* __restrict__ w,
                               const T* __restrict__ b, T* __restrict__ y, T* __restrict__ mean,
                               T* __restrict__ rstd, int64_t m, int64_t d, double eps) {
  for (int64_t i = blockIdx.x; i < m; i += gridDim.x) {
    const T* row = x + i * d;
    double s = 0, unused = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) s += static_cast<double>(row[j]);
    block_sum2(s, unused);
    const double mu = s / static_cast<double>(d);
    double sq = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const double dv = static_cast<double>(row[j]) - mu;
      sq += dv * dv;
    }
    unused = 0;
    block_sum2(sq, unused);
    const double r = 1.0 / sqrt(sq / static_cast<double>(d) + eps);
    if (threadIdx.x == 0) {
      mean[i] = static_cast<T>(mu);
      rstd[i] = static_cast<T>(r);
    }
    const T mu_t = static_cast<T>(mu), r_t = static_cast<T>(r);
    T* out = y + i * d;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      T v = (row[j] - mu_t) * r_t;
      if (w != nullptr) v = v * w[j];
      if (b != nullptr) v = v + b[j];
      out[j] = v;
    }
  }
}

template <class T>
__global__ void backward_input_kernel(const T* __restrict__ x, const T* __restrict__ g,
                                      const T* __restrict__ mean, const T* __restrict__ rstd,
                                      const T* __restrict__ w, T* __restrict__ dx, int64_t m,
                                      int64_t d) {
  for (int64_t i = blockIdx.x; i < m; i += gridDim.x) {
    const T* row = x + i * d;
    const T* grow = g + i * d;
    const T mu_i = mean[i], r_i = rstd[i];
    double sum_gy = 0, sum_gy_xhat = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const T gy = w != nullptr ? grow[j] * w[j] : grow[j];
      sum_gy += static_cast<double>(gy);
      sum_gy_xhat += static_cast<double>(gy) * static_cast<double>((row[j] - mu_i) * r_i);
    }
    block_sum2(sum_gy, sum_gy_xhat);
    const T a = static_cast<T>(sum_gy / static_cast<double>(d));
    const T c = static_cast<T>(sum_gy_xhat / static_cast<double>(d));
    T* out = dx + i * d;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const T gy = w != nullptr ? grow[j] * w[j] : grow[j];
      out[j] = r_i * (gy - a - (row[j] - mu_i) * r_i * c);
    }
  }
}

// The two per-element terms of grad_weight and grad_bias: g * xhat and g.
template <class T>
struct ParamGradTerms {
  const T* x;
  const T* g;
  const T* mean;
  const T* rstd;
  int64_t d;
  __device__ void operator()(int64_t i, int64_t j, double (&v)[2]) const {
    const T gv = g[i * d + j];
    v[0] = static_cast<double>(gv) * static_cast<double>((x[i * d + j] - mean[i]) * rstd[i]);
    v[1] = static_cast<double>(gv);
  }
};

}  // namespace

std::tuple<Tensor, Tensor, Tensor> layer_norm_forward(const Tensor& input,
                                                      const IntList& normalized_shape,
                                                      const Tensor& weight, const Tensor& bias,
                                                      double eps) {
  check_layer_norm(input, normalized_shape, weight, bias, "layer_norm");
  const Device device = input.device();
  const int64_t d = row_length(normalized_shape);
  const int64_t m = num_rows(input, normalized_shape);
  const Tensor x = native::contiguous(input);  // (M, D)
  Tensor y = native::empty(input.sizes(), input.dtype(), device);
  Tensor mean = native::empty({m}, input.dtype(), device);  // (M)
  Tensor rstd = native::empty({m}, input.dtype(), device);  // (M)
  if (m == 0 || d == 0) return {y, mean, rstd};
  const Tensor w = weight.defined() ? native::contiguous(weight) : Tensor();  // (D)
  const Tensor b = bias.defined() ? native::contiguous(bias) : Tensor();      // (D)
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  dispatch_floating(input.dtype(), "layer_norm", [&]<class T>() {
    forward_kernel<T><<<row_blocks(m), kThreads, 0, stream>>>(
        x.data_ptr<T>(), w.defined() ? w.data_ptr<T>() : nullptr,
        b.defined() ? b.data_ptr<T>() : nullptr, y.data_ptr<T>(), mean.data_ptr<T>(),
        rstd.data_ptr<T>(), m, d, eps);
    LS_CUDA_CHECK_LAUNCH();
  });
  return {y, mean, rstd};
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& grad_output,
                                                       const Tensor& input,
                                                       const IntList& normalized_shape,
                                                       const Tensor& mean, const Tensor& rstd,
                                                       const Tensor& weight, bool need_input,
                                                       bool need_weight, bool need_bias) {
  const char* op = "layer_norm_backward";
  check_layer_norm(input, normalized_shape, weight, Tensor(), op);
  native::rules::check_backward_grad(grad_output, input, op);
  LS_CHECK(mean.defined() && rstd.defined(), op, ": mean and rstd must be the forward's");
  nn_detail::check_on_device(op, input, {grad_output, mean, rstd});
  const Device device = input.device();
  const ScalarType dtype = input.dtype();
  const int64_t d = row_length(normalized_shape);
  const int64_t m = num_rows(input, normalized_shape);
  native::rules::check_backward_stats(mean, rstd, m, op);
  const Tensor x = native::contiguous(input);                                 // (M, D)
  const Tensor g = native::contiguous(native::to_dtype(grad_output, dtype));  // (M, D)
  const Tensor mu = native::contiguous(native::to_dtype(mean, dtype));        // (M)
  const Tensor rs = native::contiguous(native::to_dtype(rstd, dtype));        // (M)
  const Tensor w = weight.defined() ? native::contiguous(weight) : Tensor();  // (D)
  Tensor grad_input, grad_weight, grad_bias;
  if (need_input) grad_input = native::empty(input.sizes(), dtype, device);
  if (need_weight && weight.defined()) grad_weight = native::empty(normalized_shape, dtype, device);
  if (need_bias) grad_bias = native::empty(normalized_shape, dtype, device);
  if (d == 0) return {grad_input, grad_weight, grad_bias};
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  dispatch_floating(dtype, op, [&]<class T>() {
    if (grad_input.defined() && m > 0) {
      backward_input_kernel<T><<<row_blocks(m), kThreads, 0, stream>>>(
          x.data_ptr<T>(), g.data_ptr<T>(), mu.data_ptr<T>(), rs.data_ptr<T>(),
          w.defined() ? w.data_ptr<T>() : nullptr, grad_input.data_ptr<T>(), m, d);
      LS_CUDA_CHECK_LAUNCH();
    }
    if (grad_weight.defined() || grad_bias.defined()) {
      nn_detail::column_sums<T, 2>(ParamGradTerms<T>{x.data_ptr<T>(), g.data_ptr<T>(),
                                                     mu.data_ptr<T>(), rs.data_ptr<T>(), d},
                                   m, d,
                                   grad_weight.defined() ? grad_weight.data_ptr<T>() : nullptr,
                                   grad_bias.defined() ? grad_bias.data_ptr<T>() : nullptr, device);
    }
  });
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace lockstep::cuda_native
