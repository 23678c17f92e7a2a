// core/cuda/reduce.cu — sum, mean, max/min (with indices), argmax/argmin and
// sum_to on a CUDA device.
//
// Every reduction is put in the form (A, R, B): a contiguous x whose middle R
// elements per (a, b) are reduced. When the reduced dims form one run of
// neighbouring dims this is x = contiguous(t) as it stands; otherwise the kept
// dims are permuted to the front first (one copy), giving (A, R, 1).
//   - B == 1 (rows): a block of 256 threads reduces each row, then a tree in
//     shared memory. A few very long rows (the sum of a whole tensor) would leave
//     most of the GPU idle, so they are split into chunks reduced by separate
//     blocks (pass 1, partial results), then the partials are reduced (pass 2).
//   - B > 1 (columns): one thread per output walks r; neighbouring threads read
//     neighbouring b, so the loads coalesce.
// Float sums accumulate in float64 and integer sums in int64, as on the CPU, so
// results agree with the CPU kernels to rounding; bfloat16 sums go through a
// float32 copy (one cast pass each way). max/min keep the first index
// among ties and let NaN win, like the CPU kernels and PyTorch.
// Read before: core/cuda/cuda_loops.cuh, core/native/reduce.cpp.
// Read next: core/cuda/softmax.cu.
#include <type_traits>

#include "core/cuda/cuda_loops.cuh"
#include "core/cuda/cuda_native.h"
#include "core/native/reduce_rules.h"

namespace lockstep::cuda_native {

using namespace detail;
using namespace native::rules;  // Note [Shared kernel rules]

namespace {

constexpr int64_t kChunk = 65536;      // elements per block in a split row
constexpr int64_t kFewRows = 512;      // rows fewer than this may be split

// ---- sums ----

// out[a * chunks + c] = sum of x[a, c * chunk .. min(R, (c + 1) * chunk)) (B == 1).
template <class T, class Acc>
__global__ void sum_rows_kernel(const T* x, Acc* out, int64_t A, int64_t R, int64_t chunk,
                                int64_t chunks) {
  __shared__ Acc partial[kThreads];
  for (int64_t job = blockIdx.x; job < A * chunks; job += gridDim.x) {
    const int64_t a = job / chunks, c = job % chunks;
    const int64_t lo = c * chunk, hi = min(R, lo + chunk);
    Acc acc = 0;
    for (int64_t r = lo + threadIdx.x; r < hi; r += blockDim.x) acc += static_cast<Acc>(x[a * R + r]);
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
      if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
      __syncthreads();
    }
    if (threadIdx.x == 0) out[job] = partial[0];
    __syncthreads();  // partial[] is reused by the next job
  }
}

// out[a * B + b] = sum over r of x[(a * R + r) * B + b] (B > 1).
template <class T, class Acc>
__global__ void sum_cols_kernel(const T* x, Acc* out, int64_t A, int64_t R, int64_t B) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < A * B;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t a = i / B, b = i % B;
    Acc acc = 0;
    for (int64_t r = 0; r < R; ++r) acc += static_cast<Acc>(x[(a * R + r) * B + b]);
    out[i] = acc;
  }
}

template <class O, class Acc>
struct FinishSumFn {  // the sum, times 1/count for a mean
  bool is_mean;
  Acc inv;
  __device__ O operator()(Acc v) const { return static_cast<O>(is_mean ? v * inv : v); }
};

// How many chunks to split each of A rows of length R into (Note at the top).
int64_t chunks_for(int64_t A, int64_t R) {
  if (A >= kFewRows || R <= 2 * kChunk) return 1;
  return (R + kChunk - 1) / kChunk;
}

// The (A, R, B) sums of contiguous x as a contiguous Acc tensor of A * B elements.
template <class T>
Tensor sum_3d(const Tensor& x, int64_t A, int64_t R, int64_t B) {
  using Acc = SumAcc<T>;
  const ScalarType acc_dtype = dtype_of<Acc>();
  const Device device = x.device();
  const cudaStream_t stream = cuda::current_stream(device.index);
  Tensor out = native::empty({A * B}, acc_dtype, device);
  if (A * B == 0) return out;
  if (B > 1) {
    sum_cols_kernel<T, Acc><<<grid_for(A * B), kThreads, 0, stream>>>(
        dev_ptr<const T>(x), dev_ptr<Acc>(out), A, R, B);
    LS_CUDA_CHECK_LAUNCH();
    return out;
  }
  const int64_t chunks = chunks_for(A, R);
  if (chunks == 1) {
    sum_rows_kernel<T, Acc><<<grid_for(A * kThreads), kThreads, 0, stream>>>(
        dev_ptr<const T>(x), dev_ptr<Acc>(out), A, R, R, 1);
    LS_CUDA_CHECK_LAUNCH();
    return out;
  }
  Tensor partial = native::empty({A * chunks}, acc_dtype, device);  // pass 1
  sum_rows_kernel<T, Acc><<<grid_for(A * chunks * kThreads), kThreads, 0, stream>>>(
      dev_ptr<const T>(x), dev_ptr<Acc>(partial), A, R, kChunk, chunks);
  LS_CUDA_CHECK_LAUNCH();
  sum_rows_kernel<Acc, Acc><<<grid_for(A * kThreads), kThreads, 0, stream>>>(  // pass 2
      dev_ptr<const Acc>(partial), dev_ptr<Acc>(out), A, chunks, chunks, 1);
  LS_CUDA_CHECK_LAUNCH();
  return out;
}

// t as a contiguous (A, R, B) problem for the reduced dims in `mask`.
Tensor as_3d(const Tensor& t, const std::vector<bool>& mask, int64_t& A, int64_t& R, int64_t& B) {
  const int64_t ndim = t.dim();
  int64_t first = -1, last = -1;  // the reduced dims of size > 1
  for (int64_t d = 0; d < ndim; ++d) {
    if (mask[d] && t.size(d) != 1) {
      if (first < 0) first = d;
      last = d;
    }
  }
  bool one_run = true;
  for (int64_t d = first; first >= 0 && d <= last; ++d) one_run = one_run && (mask[d] || t.size(d) == 1);
  A = 1, R = 1, B = 1;
  if (one_run) {
    for (int64_t d = 0; d < ndim; ++d) {
      if (first >= 0 && d >= first && d <= last) R *= t.size(d);
      else if (first < 0 || d < first) A *= t.size(d);
      else B *= t.size(d);
    }
    return contiguous(t);
  }
  IntList order;
  for (int64_t d = 0; d < ndim; ++d) {
    if (!mask[d]) {
      order.push_back(d);
      A *= t.size(d);
    }
  }
  for (int64_t d = 0; d < ndim; ++d) {
    if (mask[d]) {
      order.push_back(d);
      R *= t.size(d);
    }
  }
  return contiguous(native::permute(t, order));
}

Tensor sum_impl(const Tensor& t, const IntList& dims, bool keepdim, bool is_mean) {
  const char* op = is_mean ? "mean" : "sum";
  check_defined(t, op);
  cuda::DeviceGuard guard(t.device());
  if (is_mean) check_mean_dtype(t);
  if (t.dtype() == kBFloat16) {  // a bf16 gradient's sum_to (autocast)
    // Summed as float32 (in double), rounded once more to bfloat16.
    return to_dtype(sum_impl(to_dtype(t, kFloat32), dims, keepdim, is_mean), t.dtype());
  }
  const std::vector<bool> mask = reduced_mask(t, dims, op);
  int64_t A, R, B;
  const Tensor x = as_3d(t, mask, A, R, B);
  const ScalarType out_dtype = sum_dtype(t.dtype());
  Tensor out = native::empty(reduced_shape(t.sizes(), mask, keepdim), out_dtype, t.device());
  dev_dispatch(t.dtype(), op, [&]<class T>() {
    using Acc = SumAcc<T>;
    const Tensor sums = native::view(sum_3d<T>(x, A, R, B), out.sizes());
    // mean is floating only; R = 0 gives inf, and 0 * inf = NaN, the mean of nothing.
    const Acc inv = is_mean ? static_cast<Acc>(1) / static_cast<Acc>(R) : static_cast<Acc>(1);
    dev_dispatch(out_dtype, op, [&]<class O>() {
      map1<O, Acc>(out, sums, FinishSumFn<O, Acc>{is_mean, inv}, op);
    });
  });
  return out;
}

// ---- max / min ----

template <class T>
__device__ __forceinline__ bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else {
    return false;
  }
}

// Whether (v, i) beats (best, bi): NaN wins, then the larger (kMax) or smaller
// value, then the smaller index.
template <bool kMax, class T>
__device__ __forceinline__ bool beats(T v, int64_t i, T best, int64_t bi) {
  if (is_nan(v) || is_nan(best)) return is_nan(v) && (!is_nan(best) || i < bi);
  if (v == best) return i < bi;
  return kMax ? v > best : v < best;
}

// Rows (B == 1), split into chunks: values/indices[a * chunks + c] for the
// elements [c * chunk, min(R, (c + 1) * chunk)) of row a; indices count from the row start.
template <bool kMax, class T>
__global__ void extreme_rows_kernel(const T* x, T* values, int64_t* indices, int64_t A, int64_t R,
                                    int64_t chunk, int64_t chunks) {
  __shared__ T best_v[kThreads];
  __shared__ int64_t best_i[kThreads];
  for (int64_t job = blockIdx.x; job < A * chunks; job += gridDim.x) {
    const int64_t a = job / chunks, c = job % chunks;
    const int64_t lo = c * chunk, hi = min(R, lo + chunk);
    T v = x[a * R + lo];  // every chunk has at least one element
    int64_t vi = lo;
    for (int64_t r = lo + threadIdx.x; r < hi; r += blockDim.x) {
      if (beats<kMax>(x[a * R + r], r, v, vi)) {
        v = x[a * R + r];
        vi = r;
      }
    }
    best_v[threadIdx.x] = v;
    best_i[threadIdx.x] = vi;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
      if (threadIdx.x < s &&
          beats<kMax>(best_v[threadIdx.x + s], best_i[threadIdx.x + s], best_v[threadIdx.x],
                      best_i[threadIdx.x])) {
        best_v[threadIdx.x] = best_v[threadIdx.x + s];
        best_i[threadIdx.x] = best_i[threadIdx.x + s];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      values[job] = best_v[0];
      if (indices != nullptr) indices[job] = best_i[0];
    }
    __syncthreads();
  }
}

// Columns (B > 1): one thread per (a, b).
template <bool kMax, class T>
__global__ void extreme_cols_kernel(const T* x, T* values, int64_t* indices, int64_t A, int64_t R,
                                    int64_t B) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < A * B;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t a = i / B, b = i % B;
    T v = x[a * R * B + b];
    int64_t vi = 0;
    for (int64_t r = 1; r < R; ++r) {
      const T u = x[(a * R + r) * B + b];
      if (beats<kMax>(u, r, v, vi)) {
        v = u;
        vi = r;
      }
    }
    values[i] = v;
    indices[i] = vi;
  }
}

template <bool kMax>
std::tuple<Tensor, Tensor> extreme_dim(const Tensor& t, int64_t dim, bool keepdim, const char* op) {
  const DimReduction r = dim_reduction(t, dim, keepdim, op);
  const int64_t A = r.A, R = r.R, B = r.B;
  const IntList& shape = r.out_shape;
  cuda::DeviceGuard guard(t.device());
  Tensor values = native::empty(shape, t.dtype(), t.device());
  Tensor indices = native::empty(shape, kInt64, t.device());
  if (A * B == 0) return {values, indices};
  const Tensor x = contiguous(t);
  const cudaStream_t stream = cuda::current_stream(t.device().index);
  dev_dispatch(t.dtype(), op, [&]<class T>() {
    if (B > 1) {
      extreme_cols_kernel<kMax, T><<<grid_for(A * B), kThreads, 0, stream>>>(
          dev_ptr<const T>(x), dev_ptr<T>(values), dev_ptr<int64_t>(indices), A, R, B);
    } else {
      extreme_rows_kernel<kMax, T><<<grid_for(A * kThreads), kThreads, 0, stream>>>(
          dev_ptr<const T>(x), dev_ptr<T>(values), dev_ptr<int64_t>(indices), A, R, R, 1);
    }
    LS_CUDA_CHECK_LAUNCH();
  });
  return {values, indices};
}

// max/min of every element: chunks of the flat tensor (pass 1), then their results (pass 2).
template <bool kMax>
Tensor extreme_all(const Tensor& t, const char* op) {
  check_extreme_all(t, op);
  cuda::DeviceGuard guard(t.device());
  const Tensor x = contiguous(t);
  const int64_t n = t.numel();
  const int64_t chunks = chunks_for(1, n);
  const int64_t chunk = chunks == 1 ? n : kChunk;
  Tensor partial = native::empty({chunks}, t.dtype(), t.device());
  Tensor value = native::empty({}, t.dtype(), t.device());
  const cudaStream_t stream = cuda::current_stream(t.device().index);
  dev_dispatch(t.dtype(), op, [&]<class T>() {
    extreme_rows_kernel<kMax, T><<<grid_for(chunks * kThreads), kThreads, 0, stream>>>(
        dev_ptr<const T>(x), dev_ptr<T>(partial), nullptr, 1, n, chunk, chunks);
    LS_CUDA_CHECK_LAUNCH();
    extreme_rows_kernel<kMax, T><<<1, kThreads, 0, stream>>>(
        dev_ptr<const T>(partial), dev_ptr<T>(value), nullptr, 1, chunks, chunks, 1);
    LS_CUDA_CHECK_LAUNCH();
  });
  return value;
}

}  // namespace

Tensor sum(const Tensor& t, const IntList& dims, bool keepdim) {
  return sum_impl(t, dims, keepdim, /*is_mean=*/false);
}

Tensor mean(const Tensor& t, const IntList& dims, bool keepdim) {
  return sum_impl(t, dims, keepdim, /*is_mean=*/true);
}

Tensor max_all(const Tensor& t) { return extreme_all<true>(t, "max"); }
Tensor min_all(const Tensor& t) { return extreme_all<false>(t, "min"); }

std::tuple<Tensor, Tensor> max_dim(const Tensor& t, int64_t dim, bool keepdim) {
  return extreme_dim<true>(t, dim, keepdim, "max");
}

std::tuple<Tensor, Tensor> min_dim(const Tensor& t, int64_t dim, bool keepdim) {
  return extreme_dim<false>(t, dim, keepdim, "min");
}

Tensor argmax(const Tensor& t, int64_t dim, bool keepdim) {
  return std::get<1>(extreme_dim<true>(t, dim, keepdim, "argmax"));
}

Tensor argmin(const Tensor& t, int64_t dim, bool keepdim) {
  return std::get<1>(extreme_dim<false>(t, dim, keepdim, "argmin"));
}

// As the CPU sum_to: grad itself when it already has `shape`.
Tensor sum_to(const Tensor& grad, const IntList& shape) {
  check_defined(grad, "sum_to");
  if (grad.sizes() == shape) return grad;
  const IntList dims = sum_to_dims(grad, shape);
  return native::view(cuda_native::sum(grad, dims, /*keepdim=*/true), shape);
}

}  // namespace lockstep::cuda_native
