// core/cuda/batch_norm.cu — batch normalisation on the GPU, plain and with a fused
// ReLU, forward and backward: the CPU kernels' math and contract
// (core/native/batch_norm.cpp, core/native/fused_relu.h), as three small kernels.
//
// Why not cudnnBatchNormalizationForwardTraining: its contract differs from
// lockstep's at the edges — it requires eps >= CUDNN_BN_MIN_EPSILON, both affine
// tensors, contiguous running statistics and one dtype for scale/bias/stats — and
// the fused-ReLU variants (cudnnBatchNormalizationForwardTrainingEx with an
// activation) are restricted to NHWC half precision. Three kernels give every case
// the CPU handles (no affine, strided running stats, float64, any eps) with one
// code path, and batch norm is memory-bound, so two reads of x is the cost either way.
//
// § Note [CUDA batch-norm passes]
// The input (N, C, *) is read as (N, C, S); channel c owns M = N * S values.
//   1. channel_sums: a grid of (C, splits) blocks; block (c, b) sums its slice of
//      channel c's M values (in double, one tree reduction per block, no atomics)
//      into partial[c][b]. Forward sums d = x - K and d^2 with the shift K = the
//      channel's first value (Note [One-pass batch statistics]); backward sums
//      g and g * (x - mean), with g masked by out > 0 for the fused ReLU.
//   2. finalize: a thread per channel adds its partials in order (so results do
//      not depend on timing), computes the statistics exactly as the CPU does —
//      mean, biased var clamped at 0, invstd, the running-stat update with the
//      unbiased var (M / (M - 1)) and `momentum` — and writes per-channel
//      coefficients: forward y = x * scale + shift; backward dx = a g + b x + c.
//   3. apply: an elementwise pass over all N * C * S values with those coefficients
//      (and max(., 0), or the ReLU mask on g, when fused).
// Eval mode skips pass 1: finalize reads running_mean / running_var.
//
// Read before: core/native/batch_norm.cpp, core/native/fused_relu.h, core/cuda/nn_util.h.
// Read next: core/cuda/layer_norm.cu.
#include <algorithm>
#include <cmath>

#include "core/cuda/cuda_native_nn.h"
#include "core/cuda/nn_reduce.cuh"
#include "core/cuda/nn_util.h"
#include "core/native/batch_norm_rules.h"
#include "core/native/native.h"
#include "core/shape.h"

namespace lockstep::cuda_native {

namespace {

using nn_detail::block_sum2;
using nn_detail::blocks_for;
using nn_detail::kThreads;

// Blocks per channel for pass 1: about 16 elements per thread, at most 1024 blocks in all.
int64_t splits_for(int64_t c, int64_t m) {
  const int64_t want = (m + kThreads * 16 - 1) / (kThreads * 16);
  return std::clamp<int64_t>(want, 1, std::max<int64_t>(1, 1024 / std::max<int64_t>(c, 1)));
}

// Position j = n * s + k of a channel's M values, stepped by `step` without a
// 64-bit division per element: (dn, dk) = divmod(step, s), then carry k into n.
struct RunWalk {
  int64_t n, k, dn, dk;
  __device__ RunWalk(int64_t j, int64_t s, int64_t step)  // s == 0: an empty channel, never walked
      : n(s > 0 ? j / s : 0),
        k(s > 0 ? j % s : 0),
        dn(s > 0 ? step / s : 0),
        dk(s > 0 ? step % s : 0) {}
  __device__ void advance(int64_t s) {
    n += dn;
    k += dk;
    if (k >= s) {
      k -= s;
      ++n;
    }
  }
};

// Pass 1 of the forward: partial[(c * splits + b) * 2 + {0, 1}] = sums of d and d^2,
// d = x - x[channel's first value], over block b's slice of channel c.
template <class T>
__global__ void forward_sums_kernel(const T* __restrict__ x, double* __restrict__ partial,
                                    int64_t c, int64_t s, int64_t m, int64_t splits) {
  const int64_t ch = blockIdx.x, b = blockIdx.y;
  const int64_t chunk = (m + splits - 1) / splits;
  const int64_t lo = b * chunk, hi = min(m, lo + chunk);
  const double shift = static_cast<double>(x[ch * s]);
  double sum = 0, sum_sq = 0;
  RunWalk w(lo + threadIdx.x, s, blockDim.x);
  for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x, w.advance(s)) {
    const double d = static_cast<double>(x[(w.n * c + ch) * s + w.k]) - shift;
    sum += d;
    sum_sq += d * d;
  }
  block_sum2(sum, sum_sq);
  if (threadIdx.x == 0) {
    partial[(ch * splits + b) * 2] = sum;
    partial[(ch * splits + b) * 2 + 1] = sum_sq;
  }
}

// Pass 2 of the forward, a thread per channel (Note [CUDA batch-norm passes]).
// coef[ch] = scale, coef[c + ch] = shift. Running stats are read/written with their stride.
template <class T>
__global__ void forward_finalize_kernel(const T* __restrict__ x, const double* __restrict__ partial,
                                        const T* __restrict__ w, const T* __restrict__ bias,
                                        T* running_mean, int64_t rm_stride, T* running_var,
                                        int64_t rv_stride, T* __restrict__ save_mean,
                                        T* __restrict__ save_invstd, T* __restrict__ coef,
                                        int64_t c, int64_t s, int64_t m, int64_t splits,
                                        bool training, double momentum, double eps) {
  for (int64_t ch = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; ch < c;
       ch += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double mean, var;
    if (training) {
      double sum = 0, sum_sq = 0;
      for (int64_t b = 0; b < splits; ++b) {
        sum += partial[(ch * splits + b) * 2];
        sum_sq += partial[(ch * splits + b) * 2 + 1];
      }
      const double mean_d = sum / static_cast<double>(m);
      mean = static_cast<double>(x[ch * s]) + mean_d;
      var = fmax(sum_sq / static_cast<double>(m) - mean_d * mean_d, 0.0);
      if (running_mean != nullptr) {
        T& r = running_mean[ch * rm_stride];
        r = static_cast<T>((1 - momentum) * static_cast<double>(r) + momentum * mean);
      }
      if (running_var != nullptr) {
        T& r = running_var[ch * rv_stride];
        r = static_cast<T>((1 - momentum) * static_cast<double>(r) +
                           momentum * var * static_cast<double>(m) / static_cast<double>(m - 1));
      }
    } else {
      mean = static_cast<double>(running_mean[ch * rm_stride]);
      var = static_cast<double>(running_var[ch * rv_stride]);
    }
    const double invstd = 1.0 / sqrt(var + eps);
    save_mean[ch] = static_cast<T>(mean);
    save_invstd[ch] = static_cast<T>(invstd);
    const double scale = (w != nullptr ? static_cast<double>(w[ch]) : 1.0) * invstd;
    coef[ch] = static_cast<T>(scale);
    coef[c + ch] =
        static_cast<T>((bias != nullptr ? static_cast<double>(bias[ch]) : 0.0) - mean * scale);
  }
}

// Pass 3 of the forward: y = x * scale + shift (then max(., 0) when relu).
template <class T>
__global__ void forward_apply_kernel(const T* __restrict__ x, const T* __restrict__ coef,
                                     T* __restrict__ y, int64_t total, int64_t c, int64_t s,
                                     bool relu) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ch = (i / s) % c;
    const T v = x[i] * coef[ch] + coef[c + ch];
    y[i] = relu ? (v > T(0) ? v : T(0)) : v;
  }
}

// Pass 1 of the backward: sums of gm and gm * (x - mean), gm = g masked by out > 0 when fused.
template <class T>
__global__ void backward_sums_kernel(const T* __restrict__ g, const T* __restrict__ x,
                                     const T* __restrict__ out, const T* __restrict__ mean,
                                     double* __restrict__ partial, int64_t c, int64_t s, int64_t m,
                                     int64_t splits) {
  const int64_t ch = blockIdx.x, b = blockIdx.y;
  const int64_t chunk = (m + splits - 1) / splits;
  const int64_t lo = b * chunk, hi = min(m, lo + chunk);
  const double mu = static_cast<double>(mean[ch]);
  double sum_g = 0, sum_g_xmu = 0;
  RunWalk w(lo + threadIdx.x, s, blockDim.x);
  for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x, w.advance(s)) {
    const int64_t at = (w.n * c + ch) * s + w.k;
    const double gm = (out == nullptr || out[at] > T(0)) ? static_cast<double>(g[at]) : 0.0;
    sum_g += gm;
    sum_g_xmu += gm * (static_cast<double>(x[at]) - mu);
  }
  block_sum2(sum_g, sum_g_xmu);
  if (threadIdx.x == 0) {
    partial[(ch * splits + b) * 2] = sum_g;
    partial[(ch * splits + b) * 2 + 1] = sum_g_xmu;
  }
}

// Pass 2 of the backward: grad_weight, grad_bias, and coef = (a, b, c0) per channel
// for dx = a * gm + b * x + c0 (the CPU's algebra, batch_norm.cpp).
template <class T>
__global__ void backward_finalize_kernel(const double* __restrict__ partial,
                                         const T* __restrict__ w, const T* __restrict__ mean,
                                         const T* __restrict__ invstd, T* __restrict__ grad_weight,
                                         T* __restrict__ grad_bias, T* __restrict__ coef, int64_t c,
                                         int64_t m, int64_t splits, bool training) {
  for (int64_t ch = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; ch < c;
       ch += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double sum_g = 0, sum_g_xmu = 0;
    for (int64_t b = 0; b < splits; ++b) {
      sum_g += partial[(ch * splits + b) * 2];
      sum_g_xmu += partial[(ch * splits + b) * 2 + 1];
    }
    const double is = static_cast<double>(invstd[ch]), mu = static_cast<double>(mean[ch]);
    const double sum_g_xhat = sum_g_xmu * is;
    if (grad_bias != nullptr) grad_bias[ch] = static_cast<T>(sum_g);
    if (grad_weight != nullptr) grad_weight[ch] = static_cast<T>(sum_g_xhat);
    if (coef == nullptr) continue;
    const double k = (w != nullptr ? static_cast<double>(w[ch]) : 1.0) * is;
    const double mean_g = training ? sum_g / static_cast<double>(m) : 0.0;
    const double mean_g_xhat = training ? sum_g_xhat / static_cast<double>(m) : 0.0;
    coef[ch] = static_cast<T>(k);
    coef[c + ch] = static_cast<T>(-k * is * mean_g_xhat);
    coef[2 * c + ch] = static_cast<T>(-k * mean_g + k * is * mean_g_xhat * mu);
  }
}

// Pass 3 of the backward: dx = a * gm + b * x + c0.
template <class T>
__global__ void backward_apply_kernel(const T* __restrict__ g, const T* __restrict__ x,
                                      const T* __restrict__ out, const T* __restrict__ coef,
                                      T* __restrict__ dx, int64_t total, int64_t c, int64_t s) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ch = (i / s) % c;
    const T gm = (out == nullptr || out[i] > T(0)) ? g[i] : T(0);
    dx[i] = coef[ch] * gm + coef[c + ch] * x[i] + coef[2 * c + ch];
  }
}

template <class T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

std::tuple<Tensor, Tensor, Tensor> forward_impl(const Tensor& input, const Tensor& weight,
                                                const Tensor& bias, const Tensor& running_mean,
                                                const Tensor& running_var, bool training,
                                                double momentum, double eps, bool relu,
                                                const char* op) {
  const auto [c, s] = native::rules::check_batch_norm_forward(
      input, weight, bias, running_mean, running_var, training, op,
      [&] { nn_detail::check_on_device(op, input, {weight, bias, running_mean, running_var}); });
  const int64_t n = input.size(0), m = n * s;
  const Device device = input.device();
  const ScalarType dtype = input.dtype();
  const Tensor x = native::contiguous(input);
  const Tensor w = weight.defined() ? native::contiguous(weight) : Tensor();
  const Tensor b = bias.defined() ? native::contiguous(bias) : Tensor();
  Tensor out = native::empty(x.sizes(), dtype, device);  // (N, C, *)
  Tensor save_mean = native::empty({c}, dtype, device);  // (C)
  Tensor save_invstd = native::empty({c}, dtype, device);
  if (c == 0) return {out, save_mean, save_invstd};
  Tensor coef = native::empty({2, c}, dtype, device);  // (scale, shift) per channel
  const bool update = training && running_mean.defined();
  const bool update_var = training && running_var.defined();
  const int64_t splits = training ? splits_for(c, m) : 1;
  Tensor partial = training ? native::empty({c * splits * 2}, kFloat64, device) : Tensor();
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  dispatch_floating(dtype, op, [&]<class T>() {
    if (training) {
      forward_sums_kernel<T>
          <<<dim3(static_cast<unsigned>(c), static_cast<unsigned>(splits)), kThreads, 0, stream>>>(
              x.data_ptr<T>(), partial.data_ptr<double>(), c, s, m, splits);
      LS_CUDA_CHECK_LAUNCH();
    }
    // In eval mode the running stats are read (not written) through the same pointers.
    T* rm = training ? (update ? running_mean.data_ptr<T>() : nullptr) : running_mean.data_ptr<T>();
    T* rv =
        training ? (update_var ? running_var.data_ptr<T>() : nullptr) : running_var.data_ptr<T>();
    const int64_t rm_stride = running_mean.defined() ? running_mean.stride(0) : 0;
    const int64_t rv_stride = running_var.defined() ? running_var.stride(0) : 0;
    forward_finalize_kernel<T><<<blocks_for(c), kThreads, 0, stream>>>(
        x.data_ptr<T>(), training ? partial.data_ptr<double>() : nullptr, ptr_or_null<T>(w),
        ptr_or_null<T>(b), rm, rm_stride, rv, rv_stride, save_mean.data_ptr<T>(),
        save_invstd.data_ptr<T>(), coef.data_ptr<T>(), c, s, m, splits, training, momentum, eps);
    LS_CUDA_CHECK_LAUNCH();
    const int64_t total = x.numel();
    if (total > 0) {
      forward_apply_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
          x.data_ptr<T>(), coef.data_ptr<T>(), out.data_ptr<T>(), total, c, s, relu);
      LS_CUDA_CHECK_LAUNCH();
    }
  });
  // The running statistics were written in place (see Note [Saved tensor versions]).
  if (update) running_mean.impl()->storage->bump_version();
  if (update_var) running_var.impl()->storage->bump_version();
  return {out, save_mean, save_invstd};
}

std::tuple<Tensor, Tensor, Tensor> backward_impl(const Tensor& grad_output, const Tensor& input,
                                                 const Tensor& weight, const Tensor& save_mean,
                                                 const Tensor& save_invstd,
                                                 const Tensor& relu_output, bool training,
                                                 bool need_input, bool need_weight, bool need_bias,
                                                 const char* op) {
  const auto [c, s] = native::rules::check_batch_norm_backward(
      grad_output, input, weight, save_mean, save_invstd, relu_output, op, [&] {
        nn_detail::check_on_device(op, input, {grad_output, weight, save_mean, save_invstd, relu_output});
      });
  const bool relu = relu_output.defined();
  const Device device = input.device();
  const ScalarType dtype = input.dtype();
  const int64_t n = input.size(0), m = n * s;
  const Tensor gy = native::contiguous(grad_output), x = native::contiguous(input);
  const Tensor w = weight.defined() ? native::contiguous(weight) : Tensor();
  const Tensor mean_t = native::contiguous(save_mean), invstd_t = native::contiguous(save_invstd);
  const Tensor out = relu ? native::contiguous(relu_output) : Tensor();
  Tensor grad_input = need_input ? native::empty(x.sizes(), dtype, device) : Tensor();
  Tensor grad_weight = need_weight ? native::empty({c}, dtype, device) : Tensor();
  Tensor grad_bias = need_bias ? native::empty({c}, dtype, device) : Tensor();
  if (c == 0 || !(need_input || need_weight || need_bias)) {
    return {grad_input, grad_weight, grad_bias};
  }
  const int64_t splits = splits_for(c, m);
  Tensor partial = native::empty({c * splits * 2}, kFloat64, device);
  Tensor coef = need_input ? native::empty({3, c}, dtype, device) : Tensor();
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  dispatch_floating(dtype, op, [&]<class T>() {
    const T* outp = relu ? out.data_ptr<T>() : nullptr;
    backward_sums_kernel<T>
        <<<dim3(static_cast<unsigned>(c), static_cast<unsigned>(splits)), kThreads, 0, stream>>>(
            gy.data_ptr<T>(), x.data_ptr<T>(), outp, mean_t.data_ptr<T>(),
            partial.data_ptr<double>(), c, s, m, splits);
    LS_CUDA_CHECK_LAUNCH();
    backward_finalize_kernel<T><<<blocks_for(c), kThreads, 0, stream>>>(
        partial.data_ptr<double>(), ptr_or_null<T>(w), mean_t.data_ptr<T>(), invstd_t.data_ptr<T>(),
        ptr_or_null<T>(grad_weight), ptr_or_null<T>(grad_bias), ptr_or_null<T>(coef), c, m, splits,
        training);
    LS_CUDA_CHECK_LAUNCH();
    const int64_t total = x.numel();
    if (need_input && total > 0) {
      backward_apply_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
          gy.data_ptr<T>(), x.data_ptr<T>(), outp, coef.data_ptr<T>(), grad_input.data_ptr<T>(),
          total, c, s);
      LS_CUDA_CHECK_LAUNCH();
    }
  });
  return {grad_input, grad_weight, grad_bias};
}

// A bf16 input: Note [bf16 nn ops through float32] (nn_util.h); the CPU's contract
// (Note [bfloat16 batch norm]): bf16 out and dx, float32 statistics and dw, db.
std::tuple<Tensor, Tensor, Tensor> forward_entry(const Tensor& input, const Tensor& weight,
                                                 const Tensor& bias, const Tensor& running_mean,
                                                 const Tensor& running_var, bool training,
                                                 double momentum, double eps, bool relu,
                                                 const char* op) {
  auto [out, mean, invstd] = forward_impl(nn_detail::widened(input), weight, bias, running_mean,
                                          running_var, training, momentum, eps, relu, op);
  return {nn_detail::is_bf16(input) ? nn_detail::to_bf16(out) : out, mean, invstd};  // f32 stats
}

std::tuple<Tensor, Tensor, Tensor> backward_entry(const Tensor& grad_output, const Tensor& input,
                                                  const Tensor& weight, const Tensor& save_mean,
                                                  const Tensor& save_invstd,
                                                  const Tensor& relu_output, bool training,
                                                  bool need_input, bool need_weight,
                                                  bool need_bias, const char* op) {
  const bool bf16 = nn_detail::is_bf16(input);
  LS_CHECK(!bf16 || nn_detail::is_bf16(grad_output), op, ": grad_output must be bfloat16, as "
           "the input is; convert it with .to(ls::kBFloat16)");
  auto [dx, dw, db] = backward_impl(
      nn_detail::widened(grad_output), nn_detail::widened(input), weight, save_mean, save_invstd,
      nn_detail::widened(relu_output), training, need_input, need_weight, need_bias, op);
  return {bf16 ? nn_detail::to_bf16(dx) : dx, dw, db};  // dx (N, C, *) bf16; dw, db (C) f32
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> batch_norm_forward(const Tensor& input, const Tensor& weight,
                                                      const Tensor& bias,
                                                      const Tensor& running_mean,
                                                      const Tensor& running_var, bool training,
                                                      double momentum, double eps) {
  return forward_entry(input, weight, bias, running_mean, running_var, training, momentum, eps,
                      false, "batch_norm");
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_relu_forward(const Tensor& input,
                                                           const Tensor& weight, const Tensor& bias,
                                                           const Tensor& running_mean,
                                                           const Tensor& running_var, bool training,
                                                           double momentum, double eps) {
  return forward_entry(input, weight, bias, running_mean, running_var, training, momentum, eps, true,
                      "batch_norm_relu");
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& save_mean,
    const Tensor& save_invstd, bool training, bool need_input, bool need_weight, bool need_bias) {
  return backward_entry(grad_output, input, weight, save_mean, save_invstd, Tensor(), training,
                       need_input, need_weight, need_bias, "batch_norm_backward");
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_relu_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& save_mean,
    const Tensor& save_invstd, const Tensor& output, bool training, bool need_input,
    bool need_weight, bool need_bias) {
  LS_CHECK(output.defined(),
           "batch_norm_relu_backward: output is an undefined tensor; pass the "
           "tensor batch_norm_relu_forward returned");
  return backward_entry(grad_output, input, weight, save_mean, save_invstd, output, training,
                       need_input, need_weight, need_bias, "batch_norm_relu_backward");
}

}  // namespace lockstep::cuda_native
