// core/cuda/loss.cu — cross_entropy and mse_loss on the GPU, forward and backward,
// with the CPU kernels' contract (core/native/loss.cpp).
//
// cross_entropy: log_probs = native::log_softmax(logits, 1) (the device kernel of
// core/cuda/softmax.cu, the same call the CPU op makes), then one block sums
// -lp[i, t_i] and counts the kept rows (t_i != ignore_index) in double, in a fixed
// order, and writes loss = sum / count — NaN when every row is ignored, as the
// CPU and PyTorch 1.13. Backward: one block computes s = grad / count (0 when
// count is 0) into a device scalar, then a thread per element writes
//     dL/dlogits[i, j] = exp(lp[i, j]) * s - [j == t_i] * s,   0 on ignored rows.
// The loss's gradient `grad` and the count never leave the device: no host sync.
// Targets on the CPU are range-checked on the host and copied over; targets on
// the device are checked by the forward with one read-back (Note [CUDA nn kernel
// conventions]). The backward takes the targets the forward checked and skips
// that sync; it reads nothing indexed by a target, so a bad one cannot make it
// read out of bounds.
//
// mse_loss: per-block partial sums of (x - y)^2 in double, then one block adds the
// partials in order (deterministic) and divides by n; backward 2 (x - y) grad / n.
//
// Read before: core/native/loss.cpp, core/cuda/nn_reduce.cuh. Read next: core/cuda/fused_relu.cu.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cuda/cuda_native.h"
#include "core/cuda/nn_reduce.cuh"
#include "core/cuda/nn_util.h"
#include "core/native/native.h"

namespace lockstep::cuda_native {

namespace {

using nn_detail::block_sum2;
using nn_detail::blocks_for;
using nn_detail::kThreads;

// target as a contiguous int64 tensor on logits' device, after the CPU's checks
// (of device values only when `check_device_values`).
Tensor checked_targets(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                       const char* op, bool check_device_values) {
  LS_CHECK(logits.defined() && target.defined(), op, ": logits and target must be defined");
  nn_detail::check_on_device(op, logits, {});
  LS_CHECK(logits.dim() == 2, op, ": logits must be 2-d (N, C), got ", logits.shape_str());
  LS_CHECK(logits.dtype() == kFloat32 || logits.dtype() == kFloat64, op,
           ": logits must be float32 or float64, got ", dtype_name(logits.dtype()));
  LS_CHECK(target.dtype() == kInt64, op, ": target must hold int64 class indices, got ",
           dtype_name(target.dtype()), "; convert with .to(ls::kInt64)");
  LS_CHECK(target.dim() == 1 && target.size(0) == logits.size(0), op, ": target ",
           target.shape_str(), " must have shape [N] for logits ", logits.shape_str());
  const int64_t c = logits.size(1);
  if (target.device().is_cpu()) {
    const std::vector<int64_t> t = target.to_vector<int64_t>();
    for (size_t i = 0; i < t.size(); ++i) {
      LS_CHECK(t[i] == ignore_index || (t[i] >= 0 && t[i] < c), op, ": target ", t[i],
               " (at position ", i, ") is out of bounds for C = ", c,
               " classes; targets must be in [0, ", c, ") or equal ignore_index (", ignore_index,
               ")");
    }
    return to_device(native::contiguous(target), logits.device());
  }
  LS_CHECK(target.device() == logits.device(), op, ": target is on ", target.device().str(),
           " but logits are on ", logits.device().str(), "; move it with .to(...)");
  Tensor t = native::contiguous(target);
  if (!check_device_values) return t;
  int64_t value = 0;
  const int64_t at = nn_detail::first_out_of_range(t, c, ignore_index, &value);
  LS_CHECK(at < 0, op, ": target ", value, " (at position ", at, ") is out of bounds for C = ", c,
           " classes; targets must be in [0, ", c, ") or equal ignore_index (", ignore_index, ")");
  return t;
}

// loss[0] = -sum over kept rows of lp[i, t_i] / count (one block).
template <class T>
__global__ void nll_kernel(const T* __restrict__ lp, const int64_t* __restrict__ t,
                           T* __restrict__ loss, int64_t n, int64_t c, int64_t ignore_index) {
  double sum = 0, count = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    if (t[i] == ignore_index) continue;
    sum -= static_cast<double>(lp[i * c + t[i]]);
    count += 1;
  }
  block_sum2(sum, count);
  if (threadIdx.x == 0) loss[0] = static_cast<T>(sum / count);  // NaN when count == 0
}

// scale[0] = grad / count, or 0 when no row counts (one block).
__global__ void ce_scale_kernel(const double* __restrict__ grad, const int64_t* __restrict__ t,
                                double* __restrict__ scale, int64_t n, int64_t ignore_index) {
  double count = 0, unused = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) count += t[i] != ignore_index ? 1 : 0;
  block_sum2(count, unused);
  if (threadIdx.x == 0) scale[0] = count > 0 ? grad[0] / count : 0.0;
}

template <class T>
__global__ void ce_backward_kernel(const T* __restrict__ lp, const int64_t* __restrict__ t,
                                   const double* __restrict__ scale, T* __restrict__ g,
                                   int64_t total, int64_t c, int64_t ignore_index) {
  const T s = static_cast<T>(scale[0]);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / c, col = i % c;
    const int64_t target = t[row];
    if (target == ignore_index) {
      g[i] = T(0);
      continue;
    }
    T v = exp(lp[i]) * s;
    if (col == target) v -= s;
    g[i] = v;
  }
}

// partial[blockIdx.x] = sum over the block's grid-stride share of (x - y)^2.
template <class T>
__global__ void sq_diff_partial_kernel(const T* __restrict__ x, const T* __restrict__ y,
                                       double* __restrict__ partial, int64_t n) {
  double s = 0, unused = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double d = static_cast<double>(x[i]) - static_cast<double>(y[i]);
    s += d * d;
  }
  block_sum2(s, unused);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// out[0] = sum(partial) / n (one block).
template <class T>
__global__ void mean_of_partials_kernel(const double* __restrict__ partial, int64_t parts,
                                        T* __restrict__ out, int64_t n) {
  double s = 0, unused = 0;
  for (int64_t i = threadIdx.x; i < parts; i += blockDim.x) s += partial[i];
  block_sum2(s, unused);
  if (threadIdx.x == 0) out[0] = static_cast<T>(s / static_cast<double>(n));
}

template <class T>
__global__ void mse_backward_kernel(const T* __restrict__ x, const T* __restrict__ y,
                                    const double* __restrict__ grad, T* __restrict__ g, int64_t n) {
  const T s = static_cast<T>(2.0 * grad[0] / static_cast<double>(n));
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    g[i] = (x[i] - y[i]) * s;
  }
}

// The loss's 0-d gradient as a float64 scalar on `device`.
Tensor grad_scalar(const Tensor& grad, Device device, const char* op) {
  LS_CHECK(grad.defined() && grad.numel() == 1, op,
           ": grad must hold one value (the loss is a scalar)");
  LS_CHECK(grad.is_floating_point(), op, ": grad must be floating point, got ",
           dtype_name(grad.dtype()));
  const Tensor on_device = grad.device() == device ? grad : to_device(grad, device);
  return native::contiguous(native::to_dtype(on_device, kFloat64));
}

void check_same(const Tensor& input, const Tensor& target, const char* op) {
  LS_CHECK(input.defined() && target.defined(), op, ": input and target must be defined");
  nn_detail::check_on_device(op, input, {target});
  LS_CHECK(input.sizes() == target.sizes(), op, ": input ", input.shape_str(), " and target ",
           target.shape_str(), " must have the same shape");
  LS_CHECK(
      (input.dtype() == kFloat32 || input.dtype() == kFloat64) && input.dtype() == target.dtype(),
      op, ": input (", dtype_name(input.dtype()), ") and target (", dtype_name(target.dtype()),
      ") must both be float32 or both float64");
}

}  // namespace

std::tuple<Tensor, Tensor> cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                                 int64_t ignore_index) {
  const char* op = "cross_entropy";
  const Tensor t = checked_targets(logits, target, ignore_index, op, /*check_device_values=*/true);
  const Device device = logits.device();
  const int64_t n = logits.size(0), c = logits.size(1);
  Tensor log_probs = native::contiguous(native::log_softmax(logits, 1));  // (N, C)
  Tensor loss = native::empty({}, logits.dtype(), device);
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  dispatch_floating(logits.dtype(), op, [&]<class T>() {
    nll_kernel<T><<<1, kThreads, 0, stream>>>(log_probs.data_ptr<T>(), t.data_ptr<int64_t>(),
                                              loss.data_ptr<T>(), n, c, ignore_index);
    LS_CUDA_CHECK_LAUNCH();
  });
  return {loss, log_probs};
}

Tensor cross_entropy_backward(const Tensor& grad, const Tensor& log_probs, const Tensor& target,
                              int64_t ignore_index) {
  const char* op = "cross_entropy_backward";
  const Tensor t =
      checked_targets(log_probs, target, ignore_index, op, /*check_device_values=*/false);
  const Device device = log_probs.device();
  const Tensor gd = grad_scalar(grad, device, op);
  const int64_t n = log_probs.size(0), c = log_probs.size(1);
  const Tensor lp = native::contiguous(log_probs);
  Tensor grad_logits = native::empty({n, c}, lp.dtype(), device);  // (N, C)
  const int64_t total = grad_logits.numel();
  if (total == 0) return grad_logits;
  Tensor scale = native::empty({1}, kFloat64, device);
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  ce_scale_kernel<<<1, kThreads, 0, stream>>>(gd.data_ptr<double>(), t.data_ptr<int64_t>(),
                                              scale.data_ptr<double>(), n, ignore_index);
  LS_CUDA_CHECK_LAUNCH();
  dispatch_floating(lp.dtype(), op, [&]<class T>() {
    ce_backward_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
        lp.data_ptr<T>(), t.data_ptr<int64_t>(), scale.data_ptr<double>(),
        grad_logits.data_ptr<T>(), total, c, ignore_index);
    LS_CUDA_CHECK_LAUNCH();
  });
  return grad_logits;
}

Tensor mse_loss_forward(const Tensor& input, const Tensor& target) {
  const char* op = "mse_loss";
  check_same(input, target, op);
  const Device device = input.device();
  const Tensor x = native::contiguous(input), y = native::contiguous(target);
  const int64_t n = x.numel();
  Tensor loss = native::empty({}, x.dtype(), device);
  const int64_t parts = std::min<int64_t>(blocks_for(n), 1024);
  Tensor partial = native::empty({parts}, kFloat64, device);
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    sq_diff_partial_kernel<T><<<static_cast<unsigned>(parts), kThreads, 0, stream>>>(
        x.data_ptr<T>(), y.data_ptr<T>(), partial.data_ptr<double>(), n);
    LS_CUDA_CHECK_LAUNCH();
    mean_of_partials_kernel<T><<<1, kThreads, 0, stream>>>(partial.data_ptr<double>(), parts,
                                                           loss.data_ptr<T>(), n);  // NaN if n == 0
    LS_CUDA_CHECK_LAUNCH();
  });
  return loss;
}

Tensor mse_loss_backward(const Tensor& grad, const Tensor& input, const Tensor& target) {
  const char* op = "mse_loss_backward";
  check_same(input, target, op);
  const Device device = input.device();
  const Tensor gd = grad_scalar(grad, device, op);
  const Tensor x = native::contiguous(input), y = native::contiguous(target);
  const int64_t n = x.numel();
  Tensor grad_input = native::empty(x.sizes(), x.dtype(), device);
  if (n == 0) return grad_input;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    mse_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        x.data_ptr<T>(), y.data_ptr<T>(), gd.data_ptr<double>(), grad_input.data_ptr<T>(), n);
    LS_CUDA_CHECK_LAUNCH();
  });
  return grad_input;
}

}  // namespace lockstep::cuda_native
