// core/cuda/linear.cu — the fully connected layer on the GPU, y = x W^T + b, and
// its three gradients: the CPU's plan (core/native/linear.cpp) with cuBLAS GEMMs.
//
// With X (M, in) the rows of x, W (out, in) and G = dL/dY (M, out):
//   forward       Y  = X W^T + b   bias_rows_kernel writes b into every row of Y,
//                                  then one GEMM (trans_b) adds X W^T with beta = 1:
//                                  the bias is the GEMM's C input, no extra pass over Y
//   grad_input    dX = G W         one GEMM                              (M, in)
//   grad_weight   dW = G^T X       one GEMM with trans_a                 (out, in)
//   grad_bias     db = sum_rows G  column sums in double, split over rows and columns
//                                  (Note [CUDA column sums]; deterministic)
// GEMMs go through gemm_device (Note [cuBLAS row-major GEMM] in gemm_cublas.cpp).
//
// Read before: core/native/linear.cpp, core/cuda/gemm_cublas.cpp.
// Read next: core/cuda/conv_cudnn.cpp.
#include <algorithm>

#include "core/cuda/cuda_native_nn.h"
#include "core/cuda/nn_reduce.cuh"
#include "core/cuda/nn_util.h"
#include "core/native/linear_rules.h"
#include "core/native/native.h"

namespace lockstep::cuda_native {

using native::rules::rows_of;
using native::rules::with_last;

namespace {

void check_linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  native::rules::check_linear(
      input, weight, bias, [&] { nn_detail::check_on_device("linear", input, {weight, bias}); },
      [](ScalarType t) { return t == kFloat32 || t == kFloat64; },
      ") must both be float32 or both float64 on CUDA");
}

// y (m, out) = b in every row.
template <class T>
__global__ void bias_rows_kernel(const T* __restrict__ b, T* __restrict__ y, int64_t m,
                                 int64_t out) {
  const int64_t total = m * out;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = b[i % out];
  }
}

// Element (i, j) of a row-major (m, cols) matrix, for column_sums.
template <class T>
struct MatrixEntry {
  const T* g;
  int64_t cols;
  __device__ void operator()(int64_t i, int64_t j, double (&v)[1]) const {
    v[0] = static_cast<double>(g[i * cols + j]);
  }
};

}  // namespace

Tensor linear_forward(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  check_linear(input, weight, bias);
  const Device device = input.device();
  const int64_t m = rows_of(input), in = weight.size(1), out = weight.size(0);
  const Tensor x = native::contiguous(input);                                      // (M, in)
  const Tensor w = native::contiguous(weight);                                     // (out, in)
  Tensor y = native::empty(with_last(input.sizes(), out), input.dtype(), device);  // (M, out)
  if (y.numel() == 0) return y;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  dispatch_floating(input.dtype(), "linear", [&]<class T>() {
    T beta = T(0);
    if (bias.defined()) {
      const Tensor b = native::contiguous(bias);
      bias_rows_kernel<T><<<nn_detail::blocks_for(m * out), nn_detail::kThreads, 0, stream>>>(
          b.data_ptr<T>(), y.data_ptr<T>(), m, out);
      LS_CUDA_CHECK_LAUNCH();
      beta = T(1);
    } else if (in == 0) {  // an empty product and no bias: zeros
      LS_CUDA_CHECK(cudaMemsetAsync(y.raw_data(), 0, y.nbytes(), stream));
      return;
    }
    if (in == 0) return;  // Y = b
    gemm_device<T>(device, /*trans_a=*/false, /*trans_b=*/true, m, out, in, T(1), x.data_ptr<T>(),
                   std::max<int64_t>(1, in), w.data_ptr<T>(), std::max<int64_t>(1, in), beta,
                   y.data_ptr<T>(), std::max<int64_t>(1, out));
  });
  return y;
}

std::tuple<Tensor, Tensor, Tensor> linear_backward(const Tensor& grad_output, const Tensor& input,
                                                   const Tensor& weight, bool need_input,
                                                   bool need_weight, bool need_bias) {
  LS_CHECK(grad_output.defined(), "linear_backward: grad_output is undefined");
  nn_detail::check_on_device("linear_backward", grad_output,
                             {need_input ? weight : Tensor(), need_weight ? input : Tensor()});
  const Device device = grad_output.device();
  const int64_t out = grad_output.dim() > 0 ? grad_output.size(-1) : 1;
  const int64_t m = grad_output.dim() > 0 ? rows_of(grad_output) : 1;
  const ScalarType dtype = grad_output.dtype();
  LS_CHECK(dtype == kFloat32 || dtype == kFloat64, "linear_backward: expected a float32 or ",
           "float64 grad_output but got ", dtype_name(dtype));
  const Tensor g = native::contiguous(grad_output);  // (M, out)
  cuda::DeviceGuard guard(device);
  Tensor grad_input, grad_weight, grad_bias;
  if (need_input) {
    native::rules::check_backward_weight(weight, grad_output, out);
    const int64_t in = weight.size(1);
    const Tensor w = native::contiguous(weight);  // (out, in)
    grad_input = out == 0 ? nn_detail::zeros_on(with_last(grad_output.sizes(), in), dtype, device)
                          : native::empty(with_last(grad_output.sizes(), in), dtype, device);
    if (out > 0) {
      dispatch_floating(dtype, "linear_backward", [&]<class T>() {
        gemm_device<T>(device, false, false, m, in, out, T(1), g.data_ptr<T>(),
                       std::max<int64_t>(1, out), w.data_ptr<T>(), std::max<int64_t>(1, in), T(0),
                       grad_input.data_ptr<T>(), std::max<int64_t>(1, in));
      });
    }
  }
  if (need_weight) {
    native::rules::check_backward_input(input, grad_output, m);
    const int64_t in = input.size(-1);
    const Tensor x = native::contiguous(input);  // (M, in)
    grad_weight = m == 0 ? nn_detail::zeros_on({out, in}, dtype, device)
                         : native::empty({out, in}, dtype, device);  // G^T (out, M) X (M, in)
    if (m > 0) {
      dispatch_floating(dtype, "linear_backward", [&]<class T>() {
        gemm_device<T>(device, /*trans_a=*/true, false, out, in, m, T(1), g.data_ptr<T>(),
                       std::max<int64_t>(1, out), x.data_ptr<T>(), std::max<int64_t>(1, in), T(0),
                       grad_weight.data_ptr<T>(), std::max<int64_t>(1, in));
      });
    }
  }
  if (need_bias) {
    grad_bias = native::empty({out}, dtype, device);  // (out)
    if (out > 0) {
      dispatch_floating(dtype, "linear_backward", [&]<class T>() {
        nn_detail::column_sums<T, 1>(MatrixEntry<T>{g.data_ptr<T>(), out}, m, out,
                                     grad_bias.data_ptr<T>(), nullptr, device);
      });
    }
  }
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace lockstep::cuda_native
