// core/cuda/autocast_kernels.cu — linear and conv2d under autocast on the GPU:
// bfloat16 operands, float32 accumulation, a bf16 output, float32 weight and
// bias gradients (Note [Autocast policy] in core/autocast.h; the nodes that call
// these are in autograd/functions/autocast_ops_cuda.cpp).
//
// § Note [Autocast on CUDA]
// The CPU's autocast nodes (autograd/functions/autocast_ops.cpp) call the CPU's
// bf16 kernels; on a GPU the same nodes' semantics come from cuBLAS and cuDNN:
//   linear   y (M, out) bf16 = X W^T + b   one cublasGemmEx: A, B CUDA_R_16BF,
//                                          C CUDA_R_16BF pre-filled with the bf16
//                                          bias (beta = 1), CUBLAS_COMPUTE_32F: the
//                                          bias joins the float32 sum, one rounding
//            dX (M, in)  = G W             C in the input's dtype (float32 C for a
//                                          float32 input: no bf16 rounding)
//            dW (out, in) f32 = G^T X      float32 C straight from the float32 sums
//            db (out) f32                  column sums of G in double (Note [CUDA
//                                          column sums])
//   conv2d   y (N, C_out, oH, oW) bf16     cuDNN with bf16 descriptors and a float32
//                                          compute type (conv_cudnn.cpp); the float32
//                                          bias is then added to the rounded output and
//                                          rounded again (two roundings; the CPU adds
//                                          it inside the sum, one)
//            dX bf16, widened to the input's dtype
//            dW computed by cuDNN into bf16 and widened to float32: cuDNN's
//                                          descriptor API needs dW in the dtype of x
//                                          and dy, so unlike the CPU (and like
//                                          PyTorch's autocast) the weight gradient is
//                                          rounded to bf16 once before it reaches the
//                                          float32 master weight
//            db (C_out) f32                channel sums of dy in double
// G arrives in whatever dtype the next op's backward produced and is converted to
// bf16 first, as on the CPU.
//
// Read before: core/cuda/gemm_cublas.cpp, core/cuda/conv_cudnn.cpp,
// autograd/functions/autocast_ops.cpp. Read next: autograd/functions/autocast_ops_cuda.cpp.
#include <cuda_bf16.h>

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

const __nv_bfloat16* bf16_ptr(const Tensor& t) {
  return reinterpret_cast<const __nv_bfloat16*>(t.raw_data());
}

// Element (i, j) of a row-major (m, cols) bf16 matrix, for column_sums (linear's db).
struct Bf16Rows {
  const __nv_bfloat16* g;
  int64_t cols;
  __device__ void operator()(int64_t i, int64_t j, double (&v)[1]) const {
    v[0] = static_cast<double>(__bfloat162float(g[i * cols + j]));
  }
};

// Element (i = n * P + q, channel j) of a (N, C, P) bf16 tensor, for column_sums (conv's db).
struct Bf16Channels {
  const __nv_bfloat16* g;
  int64_t c, p;
  __device__ void operator()(int64_t i, int64_t j, double (&v)[1]) const {
    const int64_t n = i / p, q = i - n * p;
    v[0] = static_cast<double>(__bfloat162float(g[(n * c + j) * p + q]));
  }
};

// y (N, C, P) bf16 += bias (C) float32, in float, rounded once more.
__global__ void add_channel_bias_kernel(__nv_bfloat16* __restrict__ y,
                                        const float* __restrict__ bias, int64_t total, int64_t c,
                                        int64_t p) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = __float2bfloat16_rn(__bfloat162float(y[i]) + bias[(i / p) % c]);
  }
}

void check_bf16(const Tensor& t, const char* what, const char* op) {
  LS_CHECK(t.defined() && t.dtype() == kBFloat16, op, " (CUDA autocast): ", what,
           " must be a bfloat16 tensor but is ",
           t.defined() ? dtype_name(t.dtype()) : "undefined",
           "; the autocast nodes convert their operands with autocast::cached_cast first");
}

// A bf16 gradient, contiguous (the incoming one converted when it is not bf16).
Tensor bf16_grad(const Tensor& grad_output, const char* op) {
  LS_CHECK(grad_output.defined(), op, ": grad_output is an undefined tensor");
  return native::contiguous(native::to_dtype(grad_output, kBFloat16));
}

}  // namespace

Tensor linear_autocast_forward(const Tensor& x16, const Tensor& w16, const Tensor& b16) {
  const char* op = "linear";
  native::rules::check_linear(
      x16, w16, b16, [&] { nn_detail::check_on_device(op, x16, {w16, b16}); },
      [](ScalarType t) { return t == kBFloat16; }, ") must be bfloat16 in the CUDA autocast linear");
  const Device device = x16.device();
  const int64_t m = rows_of(x16), in = w16.size(1), out = w16.size(0);
  const Tensor x = native::contiguous(x16);  // (M, in)
  const Tensor w = native::contiguous(w16);  // (out, in)
  Tensor y = native::empty(with_last(x16.sizes(), out), kBFloat16, device);  // (M, out)
  if (y.numel() == 0) return y;
  cuda::DeviceGuard guard(device);
  float beta = 0.0f;
  if (b16.defined()) {  // every row of Y starts as b; the GEMM adds X W^T to it in float32
    native::copy_(native::view(y, {m, out}), native::expand(b16, {m, out}));
    beta = 1.0f;
  } else if (in == 0) {  // an empty product and no bias: zeros
    LS_CUDA_CHECK(cudaMemsetAsync(y.raw_data(), 0, y.nbytes(), cuda::current_stream(device.index)));
    return y;
  }
  if (in == 0) return y;  // Y = b
  gemm_bf16_device<BFloat16>(device, /*trans_a=*/false, /*trans_b=*/true, m, out, in,
                             x.data_ptr<BFloat16>(), in, w.data_ptr<BFloat16>(), in, beta,
                             y.data_ptr<BFloat16>(), out);
  return y;
}

std::tuple<Tensor, Tensor, Tensor> linear_autocast_backward(const Tensor& grad_output,
                                                            const Tensor& x16, const Tensor& w16,
                                                            ScalarType dx_dtype, bool need_input,
                                                            bool need_weight, bool need_bias) {
  const char* op = "linear_backward";
  const Tensor g = bf16_grad(grad_output, op);  // (M, out) bf16
  nn_detail::check_on_device(op, g, {need_input ? w16 : Tensor(), need_weight ? x16 : Tensor()});
  const Device device = g.device();
  const int64_t out = g.dim() > 0 ? g.size(-1) : 1, m = g.dim() > 0 ? rows_of(g) : 1;
  cuda::DeviceGuard guard(device);
  Tensor dx, dw, db;
  if (need_input) {
    check_bf16(w16, "the saved weight", op);
    native::rules::check_backward_weight(w16, g, out);
    const int64_t in = w16.size(1);
    const Tensor w = native::contiguous(w16);  // (out, in)
    // dX (M, in) = G W, in float32 unless the input was bf16.
    const ScalarType c_dtype = dx_dtype == kBFloat16 ? kBFloat16 : kFloat32;
    dx = out == 0 ? nn_detail::zeros_on(with_last(g.sizes(), in), c_dtype, device)
                  : native::empty(with_last(g.sizes(), in), c_dtype, device);
    if (out > 0 && m > 0 && in > 0) {
      if (c_dtype == kBFloat16) {
        gemm_bf16_device<BFloat16>(device, false, false, m, in, out, g.data_ptr<BFloat16>(), out,
                                   w.data_ptr<BFloat16>(), in, 0.0f, dx.data_ptr<BFloat16>(), in);
      } else {
        gemm_bf16_device<float>(device, false, false, m, in, out, g.data_ptr<BFloat16>(), out,
                                w.data_ptr<BFloat16>(), in, 0.0f, dx.data_ptr<float>(), in);
      }
    }
    dx = native::to_dtype(dx, dx_dtype);  // a float16 input's gradient: rounded from float32
  }
  if (need_weight) {
    check_bf16(x16, "the saved input", op);
    native::rules::check_backward_input(x16, g, m);
    const int64_t in = x16.size(-1);
    const Tensor x = native::contiguous(x16);  // (M, in)
    // dW (out, in) f32 = G^T (out, M) X (M, in)
    dw = m == 0 ? nn_detail::zeros_on({out, in}, kFloat32, device)
                : native::empty({out, in}, kFloat32, device);
    if (m > 0 && out > 0 && in > 0) {
      gemm_bf16_device<float>(device, /*trans_a=*/true, false, out, in, m, g.data_ptr<BFloat16>(),
                              out, x.data_ptr<BFloat16>(), in, 0.0f, dw.data_ptr<float>(), in);
    }
  }
  if (need_bias) {
    db = native::empty({out}, kFloat32, device);  // (out) f32
    if (out > 0) {
      nn_detail::column_sums<float, 1>(Bf16Rows{bf16_ptr(g), out}, m, out, db.data_ptr<float>(),
                                       nullptr, device);
    }
  }
  return {dx, dw, db};
}

Tensor conv2d_autocast_forward(const Tensor& x16, const Tensor& w16, const Tensor& bias32,
                               const IntList& stride, const IntList& padding,
                               const IntList& dilation, int64_t groups) {
  const char* op = "conv2d";
  check_bf16(x16, "input", op);
  check_bf16(w16, "weight", op);
  LS_CHECK(!bias32.defined() || bias32.dtype() == kFloat32, op,
           " (CUDA autocast): the bias must be float32 (the master weight) but is ",
           dtype_name(bias32.dtype()));
  nn_detail::check_on_device(op, x16, {w16, bias32});
  Tensor y = conv2d_forward(x16, w16, Tensor(), stride, padding, dilation, groups);  // bf16
  if (!bias32.defined() || y.numel() == 0) return y;
  LS_CHECK(bias32.dim() == 1 && bias32.size(0) == y.size(1), op, ": bias must have shape [",
           y.size(1), "] (one value per output channel) but got ", bias32.shape_str());
  const Tensor b = native::contiguous(bias32);  // (C_out)
  const int64_t total = y.numel(), c = y.size(1), p = y.size(2) * y.size(3);
  cuda::DeviceGuard guard(x16.device());
  add_channel_bias_kernel<<<nn_detail::blocks_for(total), nn_detail::kThreads, 0,
                            cuda::current_stream(x16.device().index)>>>(
      reinterpret_cast<__nv_bfloat16*>(y.raw_data()), b.data_ptr<float>(), total, c, p);
  LS_CUDA_CHECK_LAUNCH();
  return y;
}

std::tuple<Tensor, Tensor, Tensor> conv2d_autocast_backward(
    const Tensor& grad_output, const Tensor& x16, const Tensor& w16, const IntList& stride,
    const IntList& padding, const IntList& dilation, int64_t groups, ScalarType dx_dtype,
    bool need_input, bool need_weight, bool need_bias) {
  const char* op = "conv2d_backward";
  const Tensor gy = bf16_grad(grad_output, op);  // (N, C_out, oH, oW) bf16
  check_bf16(x16, "the saved input", op);
  check_bf16(w16, "the saved weight", op);
  nn_detail::check_on_device(op, gy, {x16, w16});
  Tensor dx, dw, db;
  if (need_input || need_weight) {
    auto [gx16, gw16, unused] = conv2d_backward(gy, x16, w16, stride, padding, dilation, groups,
                                                need_input, need_weight, /*need_bias=*/false);
    if (need_input) dx = native::to_dtype(gx16, dx_dtype);  // (N, C_in, H, W)
    if (need_weight) dw = native::to_dtype(gw16, kFloat32);  // (C_out, C_in / groups, kH, kW)
  }
  if (need_bias) {
    LS_CHECK(gy.dim() == 4, op, ": grad_output must be (N, C_out, oH, oW) but got ",
             gy.shape_str());
    const int64_t n = gy.size(0), c = gy.size(1), p = gy.size(2) * gy.size(3);
    cuda::DeviceGuard guard(gy.device());
    db = native::empty({c}, kFloat32, gy.device());  // (C_out) f32
    if (n * p == 0) {
      db = nn_detail::zeros_on({c}, kFloat32, gy.device());
    } else if (c > 0) {
      nn_detail::column_sums<float, 1>(Bf16Channels{bf16_ptr(gy), c, p}, n * p, c,
                                       db.data_ptr<float>(), nullptr, gy.device());
    }
  }
  return {dx, dw, db};
}

}  // namespace lockstep::cuda_native
