// core/cuda/nn_reduce.cuh — the reductions the nn kernels share: a block-wide sum
// (batch norm's channel sums, layer norm's row statistics, the losses, gradient
// norms) and column sums of a row-major (M, D) matrix (linear's bias gradient,
// layer norm's weight and bias gradients).
//
// block_sum2 adds two double values over a block of exactly kThreads threads with
// a fixed tree in shared memory: the same inputs always give the same bits (no
// atomics, no warp-order dependence), which keeps the GPU results reproducible
// run to run. Every thread of the block must call it (it synchronises), and
// every thread gets the totals. Calling it twice in a row is safe (the shared
// arrays are reused only after the trailing __syncthreads).
//
// § Note [CUDA column sums]
// Summing the M rows of an (M, D) matrix per column with one thread per column
// leaves the GPU idle when D is a few hundred (BERT's 768) and M thousands: D
// threads each walking M rows. column_sums splits the rows too: a grid of
// (ceil(D / 32), splits) blocks of 32 x 8 threads; block (bx, by) takes 32
// adjacent columns (one warp-wide, coalesced row segment at a time) and rows
// chunk `by`, its 8 thread rows striding through the chunk; the 8 partials of a
// column are added in a fixed order into partial[by][column] (double). A second
// kernel adds the `splits` partials of each column in order. No atomics: the
// result depends only on the sizes, not on scheduling. Each element contributes
// kOut values at once (layer norm sums g * xhat and g in the same pass), given
// by a functor f(i, j, double (&out)[kOut]) (functors, not lambdas: device
// lambdas would need nvcc's --extended-lambda).
//
// Read before: core/cuda/nn_util.h. Read next: core/cuda/batch_norm.cu.
#pragma once

#include <algorithm>

#include "core/cuda/nn_util.h"
#include "core/native/native.h"

namespace lockstep::cuda_native::nn_detail {

__device__ inline void block_sum2(double& a, double& b) {
  __shared__ double sa[kThreads];
  __shared__ double sb[kThreads];
  sa[threadIdx.x] = a;
  sb[threadIdx.x] = b;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) {
      sa[threadIdx.x] += sa[threadIdx.x + half];
      sb[threadIdx.x] += sb[threadIdx.x + half];
    }
    __syncthreads();
  }
  a = sa[0];
  b = sb[0];
  __syncthreads();  // everyone has read the totals before the arrays are reused
}

inline constexpr int kColumnTile = 32;  // columns per block (threadIdx.x)
inline constexpr int kRowLanes = 8;     // thread rows per block (threadIdx.y)

// Pass 1 of Note [CUDA column sums]: partial[(by * cols + j) * kOut + q].
template <int kOut, class F>
__global__ void column_partials_kernel(F f, int64_t m, int64_t cols, int64_t splits,
                                       double* __restrict__ partial) {
  __shared__ double lanes[kRowLanes][kColumnTile][kOut];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  const int64_t chunk = (m + splits - 1) / splits;
  const int64_t lo = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t hi = min(m, lo + chunk);
  double acc[kOut];
  for (int q = 0; q < kOut; ++q) acc[q] = 0;
  if (j < cols) {
    for (int64_t i = lo + threadIdx.y; i < hi; i += kRowLanes) {
      double v[kOut];
      f(i, j, v);
      for (int q = 0; q < kOut; ++q) acc[q] += v[q];
    }
  }
  for (int q = 0; q < kOut; ++q) lanes[threadIdx.y][threadIdx.x][q] = acc[q];
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    for (int q = 0; q < kOut; ++q) {
      double s = 0;
      for (int l = 0; l < kRowLanes; ++l) s += lanes[l][threadIdx.x][q];
      partial[(static_cast<int64_t>(blockIdx.y) * cols + j) * kOut + q] = s;
    }
  }
}

// Pass 2: out[q][j] = sum over the splits of partial, in order (out[q] may be null: skipped).
template <class T, int kOut>
__global__ void column_finalize_kernel(const double* __restrict__ partial, int64_t cols,
                                       int64_t splits, T* out0, T* out1) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < cols;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    for (int q = 0; q < kOut; ++q) {
      T* out = q == 0 ? out0 : out1;
      if (out == nullptr) continue;
      double s = 0;
      for (int64_t b = 0; b < splits; ++b) s += partial[(b * cols + j) * kOut + q];
      out[j] = static_cast<T>(s);
    }
  }
}

// Column sums of an (m, cols) matrix given elementwise by `f` (Note [CUDA column
// sums]): out0[j] (and out1[j] when kOut == 2) on `device`'s current stream.
template <class T, int kOut, class F>
void column_sums(const F& f, int64_t m, int64_t cols, T* out0, T* out1, Device device) {
  static_assert(kOut == 1 || kOut == 2, "column_sums: one or two outputs");
  if (cols == 0) return;
  const int64_t col_blocks = (cols + kColumnTile - 1) / kColumnTile;
  // About 64 rows per block, and a grid of at most ~2048 blocks.
  const int64_t splits =
      std::clamp<int64_t>((m + 63) / 64, 1, std::max<int64_t>(1, 2048 / col_blocks));
  LS_CHECK(col_blocks <= 0x7fffffff, "column_sums: ", cols, " columns is too many");
  Tensor partial = native::empty({splits * cols * kOut}, kFloat64, device);
  cudaStream_t stream = cuda::current_stream(device.index);
  column_partials_kernel<kOut, F>
      <<<dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(splits)),
         dim3(kColumnTile, kRowLanes), 0, stream>>>(f, m, cols, splits, partial.data_ptr<double>());
  LS_CUDA_CHECK_LAUNCH();
  column_finalize_kernel<T, kOut><<<blocks_for(cols), kThreads, 0, stream>>>(
      partial.data_ptr<double>(), cols, splits, out0, out1);
  LS_CUDA_CHECK_LAUNCH();
}

}  // namespace lockstep::cuda_native::nn_detail
