// core/shape.h — shape arithmetic: dim wrapping, broadcasting, strided iteration.
//
// Broadcasting follows NumPy: align shapes at the right; each pair of sizes
// must be equal or one of them 1. A broadcast operand is read with stride 0
// along the stretched dims, so kernels never materialise the expansion.
// Read before: core/tensor.h. Read next: core/native/native.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"

namespace lockstep {

using IntList = std::vector<int64_t>;

// Maps a possibly negative dim into [0, ndim); `op` names the caller in the error.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
std::string shape_str(const IntList& sizes);  // "[2, 3]"

// The broadcast shape of a and b; throws naming `op` and both shapes if incompatible.
IntList broadcast_shapes(const IntList& a, const IntList& b, const char* op);

// Strides that read a tensor of (sizes, strides) as if it had shape `target`
// (which it must broadcast to): stride 0 on the stretched and new leading dims.
IntList broadcast_strides(const IntList& sizes, const IntList& strides, const IntList& target);

// Calls fn(offsets) for every index of `sizes` in row-major order, where
// offsets[k] = sum_d index[d] * strides[k][d] for operand k. The inner loop runs
// over the last dim, so contiguous operands are walked sequentially.
template <size_t N, class F>
void for_each_offset(const IntList& sizes, const IntList (&strides)[N], F&& fn) {
  const int64_t ndim = static_cast<int64_t>(sizes.size());
  for (int64_t s : sizes) {
    if (s == 0) return;
  }
  int64_t off[N > 0 ? N : 1] = {};
  if (ndim == 0) {
    fn(static_cast<const int64_t*>(off));
    return;
  }
  IntList index(static_cast<size_t>(ndim), 0);
  const int64_t inner = sizes[ndim - 1];
  while (true) {
    for (int64_t i = 0; i < inner; ++i) {
      fn(static_cast<const int64_t*>(off));
      for (size_t k = 0; k < N; ++k) off[k] += strides[k][ndim - 1];
    }
    for (size_t k = 0; k < N; ++k) off[k] -= inner * strides[k][ndim - 1];
    // Odometer step over the outer dims.
    int64_t d = ndim - 2;
    for (; d >= 0; --d) {
      if (++index[d] < sizes[d]) {
        for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
        break;
      }
      for (size_t k = 0; k < N; ++k) off[k] -= (sizes[d] - 1) * strides[k][d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace lockstep
