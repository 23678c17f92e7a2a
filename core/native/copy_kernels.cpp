// core/native/copy_kernels.cpp — the loops of Note [Copy loops].
// Read before: core/native/copy_kernels.h.
#include "core/native/copy_kernels.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/native/elementwise_loop.h"
#include "core/native/fast/transpose_tiles.h"
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

CopyPath copy_path(const Tensor& dst, const Tensor& src, const IntList& src_strides) {
  if (dst.is_contiguous() && src.is_contiguous() && dst.sizes() == src.sizes()) return CopyPath::Flat;
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
  with_pointers(dst, src, [&](auto* d0, const auto* s0) {
    using D = std::remove_pointer_t<decltype(d0)>;
    for_each_offset(outer, {dst_outer, src_outer}, [&](const int64_t* off) {
      D* d = d0 + off[0];
      const auto* s = s0 + off[1];
      parallel_for(0, (rows + kTile - 1) / kTile, 4, [&](int64_t lo, int64_t hi) {
        if constexpr (std::is_same_v<D, std::remove_cvref_t<decltype(*s)>> &&
                      (sizeof(D) == 2 || sizeof(D) == 4)) {  // Note [Transposing in registers]
          const int64_t r0 = lo * kTile, r1 = std::min(rows, hi * kTile);
          if (detail::transpose_block(s + r0, ld, d + r0 * cols, cols, r1 - r0, cols, sizeof(D))) {
            return;
          }
        }
        for (int64_t i0 = lo * kTile; i0 < std::min(rows, hi * kTile); i0 += kTile) {
          const int64_t i1 = std::min(rows, i0 + kTile);
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
