// core/native/copy_kernels.cpp — the loops of Note [Copy loops].
// Read before: core/native/copy_kernels.h.
#include "core/native/copy_kernels.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "core/native/elementwise_loop.h"
#include "core/native/fast/transpose_tiles.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/shape.h"

namespace lockstep::native {

namespace {

// d[i] = s[i] converted, i in [0, n).
template <class D, class S>
void convert_run(D* d, const S* s, int64_t n) {
  if constexpr (std::is_same_v<D, S>) {
    std::memmove(d, s, static_cast<size_t>(n) * sizeof(D));
  } else if constexpr (std::is_same_v<D, BFloat16> && !std::is_same_v<S, Half>) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) detail::store_element(d[i], static_cast<float>(s[i]));
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) d[i] = convert<D>(s[i]);
  }
}

// fn(d, s) with the typed base pointers of dst and src.
template <class F>
void with_pointers(const Tensor& dst, const Tensor& src, F&& fn) {
  dispatch_all(dst.dtype(), [&]<class D>() {
    dispatch_all(src.dtype(), [&]<class S>() {
      fn(static_cast<D*>(dst.impl()->storage->data()) + dst.storage_offset(),
         static_cast<const S*>(src.impl()->storage->data()) + src.storage_offset());
    });
  });
}

IntList drop_last(const IntList& v, size_t k) { return IntList(v.begin(), v.end() - static_cast<std::ptrdiff_t>(k)); }

}  // namespace

CopyViews in_dst_order(const Tensor& dst, const IntList& src_strides) {
  const IntList& sizes = dst.sizes();
  const IntList& strides = dst.strides();
  std::vector<size_t> order;  // dst's dims of size > 1, outermost in memory first
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] != 1) order.push_back(d);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return strides[a] > strides[b]; });
  IntList out_sizes, out_dst, out_src;
  for (size_t d : order) {
    const bool merges = !out_sizes.empty() && out_dst.back() == strides[d] * sizes[d] &&
                        out_src.back() == src_strides[d] * sizes[d];
    if (merges) {
      out_sizes.back() *= sizes[d];
      out_dst.back() = strides[d];
      out_src.back() = src_strides[d];
    } else {
      out_sizes.push_back(sizes[d]);
      out_dst.push_back(strides[d]);
      out_src.push_back(src_strides[d]);
    }
  }
  if (out_sizes.empty()) out_sizes = {1}, out_dst = {1}, out_src = {1};  // one element
  return {as_strided(dst, out_sizes, out_dst, dst.storage_offset()), out_src};
}

CopyPath copy_path(const Tensor& dst, const Tensor& /*src*/, const IntList& src_strides) {
  if (dst.is_contiguous() && src_strides == contiguous_strides(dst.sizes())) return CopyPath::Flat;
  const size_t nd = src_strides.size();
  if (nd >= 2 && dst.strides().back() == 1 && src_strides.back() == 1) return CopyPath::Rows;
  if (nd >= 2 && dst.is_contiguous() && src_strides[nd - 2] == 1 && src_strides[nd - 1] > 1) {
    return CopyPath::Transposed;
  }
  return CopyPath::Walk;
}

void copy_flat(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  with_pointers(dst, src, [&](auto* d, const auto* s) {
    parallel_for(0, n, 1 << 15, [&](int64_t lo, int64_t hi) { convert_run(d + lo, s + lo, hi - lo); });
  });
}

void copy_rows(const Tensor& dst, const Tensor& src, const IntList& src_strides) {
  const IntList outer = drop_last(dst.sizes(), 1), dst_outer = drop_last(dst.strides(), 1);
  const IntList src_outer = drop_last(src_strides, 1);
  const int64_t row = dst.sizes().back();
  with_pointers(dst, src, [&](auto* d, const auto* s) {
    for_each_offset(outer, {dst_outer, src_outer}, [&](const int64_t* off) { convert_run(d + off[0], s + off[1], row); });
  });
}

void copy_transposed(const Tensor& dst, const Tensor& src, const IntList& src_strides) {
  constexpr int64_t kTile = 32;
  const size_t nd = src_strides.size();
  const int64_t rows = dst.sizes()[nd - 2], cols = dst.sizes()[nd - 1];
  const int64_t ld = src_strides[nd - 1];  // element (i, j) of a source matrix: i + j * ld
  const IntList outer = drop_last(dst.sizes(), 2), dst_outer = drop_last(dst.strides(), 2);
  const IntList src_outer = drop_last(src_strides, 2);
  std::vector<int64_t> dst_at, src_at;  // the matrices' offsets, in order
  for_each_offset(outer, {dst_outer, src_outer}, [&](const int64_t* off) {
    dst_at.push_back(off[0]);
    src_at.push_back(off[1]);
  });
  // Work item = (matrix, tile of 32 rows): a batch of small matrices (an image's
  // (C, H W) with few channels) still splits over the threads.
  const int64_t tiles = (rows + kTile - 1) / kTile;
  const int64_t items = static_cast<int64_t>(dst_at.size()) * tiles;
  with_pointers(dst, src, [&](auto* d0, const auto* s0) {
    using D = std::remove_pointer_t<decltype(d0)>;
    parallel_for(0, items, 4, [&](int64_t lo, int64_t hi) {
      for (int64_t item = lo; item < hi; ++item) {
        D* d = d0 + dst_at[static_cast<size_t>(item / tiles)];
        const auto* s = s0 + src_at[static_cast<size_t>(item / tiles)];
        const int64_t i0 = item % tiles * kTile, i1 = std::min(rows, i0 + kTile);
        using S = std::remove_cvref_t<decltype(*s)>;  // Note [Transposing in registers]
        if constexpr (std::is_same_v<D, S> && (sizeof(D) == 2 || sizeof(D) == 4)) {
          if (detail::transpose_block(s + i0, ld, d + i0 * cols, cols, i1 - i0, cols, sizeof(D))) {
            continue;
          }
        } else if constexpr (std::is_same_v<D, float> && std::is_same_v<S, BFloat16>) {
          if (detail::transpose_widen_bf16(s + i0, ld, d + i0 * cols, cols, i1 - i0, cols)) continue;
        } else if constexpr (std::is_same_v<D, BFloat16> && std::is_same_v<S, float>) {
          if (detail::transpose_round_bf16(s + i0, ld, d + i0 * cols, cols, i1 - i0, cols)) continue;
        }
        for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
          const int64_t j1 = std::min(cols, j0 + kTile);
          for (int64_t i = i0; i < i1; ++i) {
            for (int64_t j = j0; j < j1; ++j) {
              if constexpr (std::is_same_v<D, std::remove_cvref_t<decltype(*s)>>) {
                d[i * cols + j] = s[i + j * ld];
              } else {
                d[i * cols + j] = convert<D>(s[i + j * ld]);
              }
            }
          }
        }
      }
    });
  });
}

void copy_walk(const Tensor& dst, const Tensor& src, const IntList& src_strides) {
  with_pointers(dst, src, [&](auto* d, const auto* s) {
    using D = std::remove_pointer_t<decltype(d)>;
    for_each_offset(dst.sizes(), {dst.strides(), src_strides},
                    [&](const int64_t* off) { d[off[0]] = convert<D>(s[off[1]]); });
  });
}

}  // namespace lockstep::native
