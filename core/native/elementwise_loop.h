// core/native/elementwise_loop.h — the loop behind every elementwise kernel.
//
// map_elements<Out, In...>(out, {in...}, f) sets out[idx] = f(in0[idx], in1[idx], ...)
// for every index idx of out's shape. Inputs broadcast to out's shape; out may be
// any non-overlapping strided tensor (binary_ writes into `self`, which may be a view).
// It works in three steps:
//   1. strides:  every operand's strides over out's shape (0 on broadcast dims);
//   2. coalesce: merge neighbouring dims that every operand steps through as one,
//                so contiguous operands become 1-d and a bias add (N, C) + (C)
//                stays 2-d (see coalesce_dims);
//   3. loop:     the elements are split into chunks across threads; each chunk
//                walks runs of the innermost dim. A run whose operands all have
//                stride 1 is a plain indexed loop the compiler vectorises; other
//                runs step each pointer by its own stride (gathers).
//
// Note [Vectorising loops]
// GCC at -O2 only vectorises loops that need no runtime alias checks and no scalar
// epilogue, which rules out almost every kernel loop (pointers may alias, n is
// rarely a multiple of the vector width). `#pragma omp simd` states that the
// iterations are independent, so the loop is vectorised anyway; the build compiles
// with OpenMP. An in-place op (out == in0) is still independent per element.
// Loops that call libm (exp, erf, tanh, ...) run one element at a time, since
// glibc declares its vector math functions only under -ffast-math.
//
// Read before: core/shape.h (broadcast_strides), core/parallel.h.
// Read next: core/native/elementwise.cpp, core/native/unary.cpp.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>
#include <utility>

#include "core/parallel.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace lockstep::native::detail {

// Elements per parallel chunk: below this, threads cost more than they save.
inline constexpr int64_t kGrain = 32768;

// Drops size-1 dims and merges dim d into the dim before it wherever every operand
// has stride[d-1] == stride[d] * size[d] (the two dims are then one longer dim).
// Leaves at least one dim, so a 0-d tensor becomes sizes {1}.
template <size_t N>
void coalesce_dims(IntList& sizes, std::array<IntList, N>& strides) {
  IntList new_sizes;
  std::array<IntList, N> new_strides;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    bool merge = !new_sizes.empty();
    for (size_t k = 0; k < N && merge; ++k) {
      merge = new_strides[k].back() == strides[k][d] * sizes[d];
    }
    if (merge) {
      new_sizes.back() *= sizes[d];
      for (size_t k = 0; k < N; ++k) new_strides[k].back() = strides[k][d];
    } else {
      new_sizes.push_back(sizes[d]);
      for (size_t k = 0; k < N; ++k) new_strides[k].push_back(strides[k][d]);
    }
  }
  if (new_sizes.empty()) {
    new_sizes.push_back(1);
    for (size_t k = 0; k < N; ++k) new_strides[k].push_back(0);
  }
  sizes = std::move(new_sizes);
  strides = std::move(new_strides);
}

// True when some element of t is reachable from two indices (a dim of size > 1
// with stride 0, as made by expand): writing into t would then race with itself.
inline bool has_internal_overlap(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1 && t.stride(d) == 0) return true;
  }
  return false;
}

// out[idx] = f(inputs[0][idx], inputs[1][idx], ...); see the file comment.
// Out and In... are the element types of out and the inputs (dtypes must match).
template <class Out, class... In, class F>
void map_elements(const Tensor& out, const std::array<Tensor, sizeof...(In)>& inputs, F f) {
  constexpr size_t N = sizeof...(In) + 1;  // operand 0 is out
  const int64_t numel = out.numel();
  if (numel == 0) return;

  // 1-2. Strides over out's shape, then coalesced.
  IntList sizes = out.sizes();
  std::array<IntList, N> strides;
  strides[0] = out.strides();
  for (size_t k = 1; k < N; ++k) {
    strides[k] = broadcast_strides(inputs[k - 1].sizes(), inputs[k - 1].strides(), sizes);
  }
  coalesce_dims(sizes, strides);
  const int64_t ndim = static_cast<int64_t>(sizes.size());
  const int64_t inner = sizes[ndim - 1];
  std::array<int64_t, N> inner_stride;
  bool all_unit = true;
  for (size_t k = 0; k < N; ++k) {
    inner_stride[k] = strides[k][ndim - 1];
    all_unit = all_unit && inner_stride[k] == 1;
  }

  Out* out_base = out.data_ptr<Out>();
  const auto in_base = [&]<size_t... I>(std::index_sequence<I...>) {
    return std::tuple<const In*...>(inputs[I].template data_ptr<In>()...);
  }(std::index_sequence_for<In...>{});

  // One run of `len` elements along the innermost dim, starting at element offsets `off`.
  auto run = [&]<size_t... I>(std::index_sequence<I...>, const std::array<int64_t, N>& off,
                              int64_t len) {
    Out* o = out_base + off[0];
    const std::tuple<const In*...> p(std::get<I>(in_base) + off[I + 1]...);
    if (all_unit) {
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i] = f(std::get<I>(p)[i]...);
    } else {
      const std::array<int64_t, N> s = inner_stride;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i * s[0]] = f(std::get<I>(p)[i * s[I + 1]]...);
    }
  };

  // 3. Each chunk [lo, hi) of the row-major element order: find lo's index and
  // offsets, then alternate runs along the innermost dim with odometer steps.
  parallel_for(0, numel, kGrain, [&](int64_t lo, int64_t hi) {
    IntList index(static_cast<size_t>(ndim));
    std::array<int64_t, N> off{};
    int64_t rest = lo;
    for (int64_t d = ndim - 1; d >= 0; --d) {
      index[d] = rest % sizes[d];
      rest /= sizes[d];
      for (size_t k = 0; k < N; ++k) off[k] += index[d] * strides[k][d];
    }
    while (lo < hi) {
      const int64_t len = std::min(inner - index[ndim - 1], hi - lo);
      run(std::index_sequence_for<In...>{}, off, len);
      lo += len;
      if (lo >= hi) break;
      // Move to the start of the next row: reset the inner dim, carry into the outer ones.
      for (size_t k = 0; k < N; ++k) off[k] -= index[ndim - 1] * strides[k][ndim - 1];
      index[ndim - 1] = 0;
      for (int64_t d = ndim - 2; d >= 0; --d) {
        for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
        if (++index[d] < sizes[d]) break;
        for (size_t k = 0; k < N; ++k) off[k] -= sizes[d] * strides[k][d];
        index[d] = 0;
      }
    }
  });
}

}  // namespace lockstep::native::detail
