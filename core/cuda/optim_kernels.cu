// core/cuda/optim_kernels.cu — the optimizers' fused updates on the GPU, and the
// gradient-norm reduction of clip_grad_norm_.
//
// core/native/optim_step.cpp updates a CPU parameter in one pass over raw memory;
// for a parameter on a CUDA device it dispatches here (Note [CUDA dispatch]): one launch
// per parameter, a thread per element doing the same arithmetic in the same
// order and the same precision (T, with the step's scalars computed in double
// on the host and rounded to T, as the CPU loop does), so a step on the GPU
// matches the CPU to the last bit or two (the only difference can come from a
// fused multiply-add where the CPU rounded twice). grad_norm_part reduces
// sum |g|^p in double — per-block partials, then one block adds them in order —
// and returns it to the host: clip_grad_norm_ returns the norm as a double, so
// this one read-back per gradient is part of its API.
// Read before: core/native/optim_step.h, core/cuda/nn_reduce.cuh.
// Read next: optim/sgd.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cuda/cuda_native_nn.h"
#include "core/cuda/nn_reduce.cuh"
#include "core/cuda/nn_util.h"
#include "core/native/native.h"
#include "core/native/optim_update.h"

namespace lockstep::cuda_native {

namespace {

using nn_detail::block_sum2;
using nn_detail::blocks_for;
using nn_detail::kThreads;

// One thread per element, the CPU's formulas (Note [Shared optimizer updates]).
template <class T>
__global__ void sgd_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ buf,
                           int64_t n, optim_update::SgdElementScalars<T> s) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    optim_update::sgd_element(p, g, buf, i, s);
  }
}

template <class T>
__global__ void adam_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m,
                            T* __restrict__ v, T* __restrict__ v_max, int64_t n,
                            optim_update::AdamElementScalars<T> s) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    optim_update::adam_element(p, g, m, v, v_max, i, s);
  }
}

// partial[blockIdx.x] = sum |g|^p (or max |g| when inf) over the block's share.
template <class T>
__global__ void norm_partial_kernel(const T* __restrict__ g, int64_t n, double p, bool inf,
                                    double* __restrict__ partial) {
  double acc = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double a = fabs(static_cast<double>(g[i]));
    if (inf) {
      acc = fmax(acc, a);
    } else if (p == 2.0) {
      acc += a * a;
    } else {
      acc += pow(a, p);
    }
  }
  if (inf) {  // a max is order-independent: a shared-memory tree of maxima
    __shared__ double s[kThreads];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half >>= 1) {
      if (threadIdx.x < half) s[threadIdx.x] = fmax(s[threadIdx.x], s[threadIdx.x + half]);
      __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
    return;
  }
  double unused = 0;
  block_sum2(acc, unused);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

void check_same_layout(const char* op, const Tensor& p, const Tensor& t, const char* what) {
  if (!t.defined()) return;
  LS_CHECK(t.sizes() == p.sizes() && t.dtype() == p.dtype() && t.is_contiguous(), op, ": ", what,
           " (", t.dtype(), " ", t.shape_str(), ") must be contiguous with the parameter's shape ",
           p.shape_str(), " and dtype ", p.dtype());
}

void check_param(const char* op, const Tensor& p) {
  LS_CHECK(p.defined() && p.is_contiguous() && (p.dtype() == kFloat32 || p.dtype() == kFloat64), op,
           ": the parameter must be a contiguous float32 or float64 tensor");
}

}  // namespace

void sgd_step_(const Tensor& p, const Tensor& g, const Tensor& buf, double lr, double momentum,
               double dampening, double weight_decay, bool nesterov, bool first) {
  const char* op = "SGD.step (CUDA)";
  check_param(op, p);
  nn_detail::check_on_device(op, p, {g, buf});
  check_same_layout(op, p, g, "the gradient");
  check_same_layout(op, p, buf, "momentum_buffer");
  const bool use_momentum = momentum != 0.0;
  LS_CHECK(!use_momentum || buf.defined(), op, ": momentum needs a momentum_buffer");
  const int64_t n = p.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(p.device());
  cudaStream_t stream = cuda::current_stream(p.device().index);
  dispatch_floating(p.dtype(), op, [&]<class T>() {
    sgd_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        p.data_ptr<T>(), g.data_ptr<T>(), use_momentum ? buf.data_ptr<T>() : nullptr, n,
        optim_update::SgdElementScalars<T>{static_cast<T>(lr), static_cast<T>(weight_decay),
                                    static_cast<T>(momentum), static_cast<T>(1.0 - dampening),
                                    use_momentum, nesterov, first});
    LS_CUDA_CHECK_LAUNCH();
  });
}

void adam_step_(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                const Tensor& v_max, double beta1, double beta2, double eps, double step_size,
                double bc2_sqrt, double decay, double l2) {
  const char* op = "Adam.step (CUDA)";
  check_param(op, p);
  nn_detail::check_on_device(op, p, {g, m, v, v_max});
  check_same_layout(op, p, g, "the gradient");
  LS_CHECK(m.defined() && v.defined(), op, ": exp_avg and exp_avg_sq must be defined");
  check_same_layout(op, p, m, "exp_avg");
  check_same_layout(op, p, v, "exp_avg_sq");
  check_same_layout(op, p, v_max, "max_exp_avg_sq");
  const int64_t n = p.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(p.device());
  cudaStream_t stream = cuda::current_stream(p.device().index);
  dispatch_floating(p.dtype(), op, [&]<class T>() {
    adam_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        p.data_ptr<T>(), g.data_ptr<T>(), m.data_ptr<T>(), v.data_ptr<T>(),
        v_max.defined() ? v_max.data_ptr<T>() : nullptr, n,
        optim_update::AdamElementScalars<T>{static_cast<T>(beta1), static_cast<T>(1.0 - beta1),
                                      static_cast<T>(beta2), static_cast<T>(1.0 - beta2),
                                      static_cast<T>(eps), static_cast<T>(step_size),
                                      static_cast<T>(bc2_sqrt), static_cast<T>(decay),
                                      static_cast<T>(l2)});
    LS_CUDA_CHECK_LAUNCH();
  });
}

double grad_norm_part(const Tensor& g, double norm_type) {
  const char* op = "clip_grad_norm_ (CUDA)";
  nn_detail::check_on_device(op, g, {});
  LS_CHECK(g.dtype() == kFloat32 || g.dtype() == kFloat64, op,
           ": expected a float32 or float64 gradient, got ", g.dtype());
  const int64_t n = g.numel();
  if (n == 0) return 0.0;
  const bool inf = std::isinf(norm_type);
  const Device device = g.device();
  const Tensor c = native::contiguous(g);
  const int64_t parts = std::min<int64_t>(blocks_for(n), 1024);
  Tensor partial = native::empty({parts}, kFloat64, device);
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  dispatch_floating(c.dtype(), op, [&]<class T>() {
    norm_partial_kernel<T><<<static_cast<unsigned>(parts), kThreads, 0, stream>>>(
        c.data_ptr<T>(), n, norm_type, inf, partial.data_ptr<double>());
    LS_CUDA_CHECK_LAUNCH();
  });
  // `parts` doubles (at most 8 KiB) to the host, combined there in order.
  std::vector<double> host(static_cast<size_t>(parts));
  LS_CUDA_CHECK(cudaMemcpyAsync(host.data(), partial.raw_data(), parts * sizeof(double),
                                cudaMemcpyDeviceToHost, stream));
  LS_CUDA_CHECK(cudaStreamSynchronize(stream));
  double total = 0;
  for (double v : host) total = inf ? std::max(total, v) : total + v;
  return total;
}

}  // namespace lockstep::cuda_native
