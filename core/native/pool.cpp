// core/native/pool.cpp — max_pool2d, forward and backward.
//
// It works plane by plane: an (N, C, H, W) input is N * C independent (H, W)
// planes, which run in parallel.
//
// max_pool2d: output (oy, ox) is the maximum over the window of rows
// [oy*sh - ph, oy*sh - ph + kH) and columns [ox*sw - pw, ox*sw - pw + kW),
// clipped to the plane (padding counts as -inf, so it never wins). The forward
// also returns where each maximum was, as the flat position h * W + w in its
// plane (PyTorch's indices); the backward adds each grad_output element to that
// position, so overlapping windows that share a maximum add up there. The
// forward's inner loop is branch-free and vectorized (Note [Max-pool fast path]);
// float32 windows other than side by side run the separable kernels of
// core/native/fast/pool_max_fast.cpp (Note [Separable max-pool]), as does every
// float32 backward. Which of these runs is choose_max_pool's choice
// (pool_dispatch.cpp). adaptive_avg_pool2d is in pool_avg.cpp.
//
// Read before: core/native/nn_kernels.h. Read next: core/native/fast/pool_max_fast.cpp,
// core/native/pool_avg.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/native/bf16_rows.h"
#include "core/native/cuda_dispatch.h"
#include "core/native/elementwise_loop.h"
#include "core/native/fast/pool_max_channels_last.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/native/fast/pool_max_2x2.h"
#include "core/native/fast/pool_max_fast.h"
#include "core/native/pool_dispatch.h"
#include "core/native/pool_planes.h"
#include "core/native/pool_rules.h"
#include "core/native/fast/streaming_store.h"
#include "core/parallel.h"

namespace lockstep::native {

namespace {

using rules::PoolWindow;

// max_pool2d takes bfloat16 images itself (Note [bfloat16 pooling]).
void check_image(const Tensor& input, const char* op, bool bfloat16_ok = false) {
  rules::check_image(input, op, [] {}, bfloat16_ok);
}

using pool_detail::for_each_plane;
using pool_detail::plane_grain;

// § Note [Max-pool fast path]
// Output (oy, ox) is the first maximum over its window in row-major order, or
// the last NaN if there is one (`v > best || v is NaN`, as PyTorch). Written
// as one compare-and-branch per element, random data mispredicts about every
// other branch, which dominated the pool's time. The fast paths keep a chunk of outputs in local arrays
// (maxima and same-width indices: int32 for float, int64 for double) and visit
// the window positions one by one across the whole chunk, with selects instead
// of branches, which the compiler vectorizes:
//   - unpadded windows side by side (kw <= sw, as 2x2 stride 2): whole output
//     rows at once, since rows 14 or 7 wide would leave vectors mostly empty
//     (max_pool_side_by_side);
//   - otherwise, per output row, the columns whose windows lie wholly inside
//     the plane ("interior", max_pool_interior); the few border columns run
//     the per-window loop.
// Every path visits a window in the same row-major order, so the results, ties
// and NaNs included, are the same. On the small CNN's pools this was several
// times faster than the branchy loop, and faster than oneDNN's pooling on the
// same NCHW tensors even before converting oneDNN's workspace to our int64
// indices, so oneDNN's is not used. For float32 and bf16 with AVX-512, the
// 2x2 stride-2 windows now take the masked kernel of Note [2x2 max-pool]
// (fast/pool_max_2x2.cpp), about twice as fast again. (The measurements and
// how to re-measure them: docs/results/kernel_choices.md.) Other side-by-side windows (and 2x2 without AVX-512) run the kernel
// below; every other float32 window goes to the separable kernels (Note
// [Separable max-pool] in core/native/fast/pool_max_fast.cpp), faster than
// max_pool_interior on ResNet50's stem pool; float64 keeps both paths here.

// Interior columns are done this many at a time (local rows of 512 bytes).
constexpr int64_t kInteriorChunk = 128;

// The interior columns [c0, c0 + len) of one output row, rows [y0, y1) of the
// window; positions are flat in the plane. kStride is sw, or 0 when not a constant.
template <int64_t kStride, class T>
void max_pool_interior(const T* __restrict src, const PoolWindow& p, int64_t y0, int64_t y1,
                       int64_t c0, int64_t len, T* __restrict best, int64_t* __restrict best_at) {
  using Index = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  const int64_t sw = kStride != 0 ? kStride : p.sw;
  const int64_t w = p.w, kw = p.kw, left = c0 * sw - p.pw;  // input column of c0's window
  alignas(64) T vb[kInteriorChunk];
  alignas(64) Index vi[kInteriorChunk];
  for (int64_t j = 0; j < len; ++j) {
    vb[j] = -std::numeric_limits<T>::infinity();
    vi[j] = static_cast<Index>(y0 * w + left + j * sw);
  }
  for (int64_t iy = y0; iy < y1; ++iy) {
    for (int64_t kj = 0; kj < kw; ++kj) {
      const T* row = src + iy * w + left + kj;
      const auto base = static_cast<Index>(iy * w + left + kj);
      for (int64_t j = 0; j < len; ++j) {
        const T v = row[j * sw];
        const bool take = (v > vb[j]) | (v != v);  // v != v: v is NaN
        vb[j] = take ? v : vb[j];
        vi[j] = take ? static_cast<Index>(base + j * sw) : vi[j];
      }
    }
  }
  for (int64_t j = 0; j < len; ++j) {
    best[j] = vb[j];
    best_at[j] = vi[j];
  }
}

// The widest stride the side-by-side path takes (its local copy is kInteriorChunk * this).
constexpr int64_t kMaxSideBySideStride = 4;

// An unpadded plane whose windows sit side by side along rows (kw <= sw, as
// 2x2 stride 2): output rows are short (14 or 7 wide in the small CNN), which
// would leave vectors mostly empty, so whole output rows are taken together,
// up to kInteriorChunk outputs. For each window row ki, the input rows they
// read are copied end to end into `line`, where output e's window columns are
// line[e * sw + kj]; each (ki, kj) is then one vectorized pass over the chunk.
// Visits windows in the same row-major order as the per-window loop.
template <int64_t kStride, class T>
void max_pool_side_by_side(const T* __restrict src, const PoolWindow& p, T* __restrict dst,
                           int64_t* __restrict idx) {
  using Index = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  const int64_t sw = kStride != 0 ? kStride : p.sw;
  const int64_t span = p.ow * sw;  // input columns under one output row's windows
  const int64_t rows_per_chunk = std::max<int64_t>(1, kInteriorChunk / p.ow);
  alignas(64) T vb[kInteriorChunk];
  alignas(64) Index vi[kInteriorChunk], corner[kInteriorChunk];
  alignas(64) T line[kInteriorChunk * kMaxSideBySideStride];
  for (int64_t oy0 = 0; oy0 < p.oh; oy0 += rows_per_chunk) {
    const int64_t rows = std::min<int64_t>(rows_per_chunk, p.oh - oy0);
    const int64_t len = rows * p.ow;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t ox = 0; ox < p.ow; ++ox) {
        corner[r * p.ow + ox] = static_cast<Index>((oy0 + r) * p.sh * p.w + ox * sw);
      }
    }
    for (int64_t e = 0; e < len; ++e) {
      vb[e] = -std::numeric_limits<T>::infinity();
      vi[e] = corner[e];
    }
    for (int64_t ki = 0; ki < p.kh; ++ki) {
      for (int64_t r = 0; r < rows; ++r) {
        std::copy_n(src + ((oy0 + r) * p.sh + ki) * p.w, span, line + r * span);
      }
      for (int64_t kj = 0; kj < p.kw; ++kj) {
        const auto offset = static_cast<Index>(ki * p.w + kj);
        const T* col = line + kj;
        for (int64_t e = 0; e < len; ++e) {
          const T v = col[e * sw];
          const bool take = (v > vb[e]) | (v != v);  // v != v: v is NaN
          vb[e] = take ? v : vb[e];
          vi[e] = take ? static_cast<Index>(corner[e] + offset) : vi[e];
        }
      }
    }
    for (int64_t e = 0; e < len; ++e) {
      dst[oy0 * p.ow + e] = vb[e];
      idx[oy0 * p.ow + e] = vi[e];
    }
  }
}

// The fast paths' int32 indices must hold every flat position of the plane.
bool fits_int32(const PoolWindow& p) { return p.h * p.w < (int64_t{1} << 31); }

}  // namespace

bool max_pool_side_by_side_applies(const PoolWindow& p) {
  return fits_int32(p) && p.ph == 0 && p.pw == 0 && p.kw <= p.sw &&
         p.sw <= kMaxSideBySideStride && p.ow <= kInteriorChunk;
}

namespace {

// One plane by the side-by-side loop (`side_by_side`: choose_max_pool named it)
// or window by window.
template <class T>
void max_pool_plane(const T* src, const PoolWindow& p, T* dst, int64_t* idx, bool side_by_side) {
  const bool fits = fits_int32(p);
  if (side_by_side) {
    if (p.sw == 2) {
      max_pool_side_by_side<2>(src, p, dst, idx);
    } else {
      max_pool_side_by_side<0>(src, p, dst, idx);
    }
    return;
  }
  // Interior columns: ox * sw - pw >= 0 and ox * sw - pw + kw <= w.
  const int64_t ox_lo = std::min<int64_t>((p.pw + p.sw - 1) / p.sw, p.ow);
  const int64_t ox_hi = fits && p.w + p.pw >= p.kw
                            ? std::clamp<int64_t>((p.w + p.pw - p.kw) / p.sw + 1, ox_lo, p.ow)
                            : ox_lo;
  for (int64_t oy = 0; oy < p.oh; ++oy) {
    const int64_t y0 = std::max<int64_t>(oy * p.sh - p.ph, 0);
    const int64_t y1 = std::min<int64_t>(oy * p.sh - p.ph + p.kh, p.h);
    T* best = dst + oy * p.ow;
    int64_t* best_at = idx + oy * p.ow;
    auto border = [&](int64_t ox) {
      const int64_t x0 = std::max<int64_t>(ox * p.sw - p.pw, 0);
      const int64_t x1 = std::min<int64_t>(ox * p.sw - p.pw + p.kw, p.w);
      T b = -std::numeric_limits<T>::infinity();
      int64_t at = y0 * p.w + x0;
      for (int64_t iy = y0; iy < y1; ++iy) {
        for (int64_t ix = x0; ix < x1; ++ix) {
          const T v = src[iy * p.w + ix];
          if (v > b || std::isnan(v)) {  // NaN propagates, as in PyTorch
            b = v;
            at = iy * p.w + ix;
          }
        }
      }
      best[ox] = b;
      best_at[ox] = at;
    };
    for (int64_t ox = 0; ox < ox_lo; ++ox) border(ox);
    for (int64_t c0 = ox_lo; c0 < ox_hi; c0 += kInteriorChunk) {
      const int64_t len = std::min<int64_t>(kInteriorChunk, ox_hi - c0);
      if (p.sw == 1) {
        max_pool_interior<1>(src, p, y0, y1, c0, len, best + c0, best_at + c0);
      } else if (p.sw == 2) {
        max_pool_interior<2>(src, p, y0, y1, c0, len, best + c0, best_at + c0);
      } else {
        max_pool_interior<0>(src, p, y0, y1, c0, len, best + c0, best_at + c0);
      }
    }
    for (int64_t ox = ox_hi; ox < p.ow; ++ox) border(ox);
  }
}

// The float32 forward of planes [lo, hi) of x (planes of win.h x win.w) by `impl`
// (choose_max_pool): the 2x2 stride-2 kernel (Note [2x2 max-pool] in
// core/native/fast/pool_max_2x2.cpp), the separable kernels (Note [Separable
// max-pool] in core/native/fast/pool_max_fast.cpp), or max_pool_plane.
void max_pool_float_planes(const float* x, const PoolWindow& win, float* y, int64_t* idx,
                           int64_t lo, int64_t hi, MaxPoolImpl impl,
                           const detail::SeparableMaxPoolOptions& options) {
  if (impl == MaxPoolImpl::TwoByTwo) {  // Note [2x2 max-pool]
    detail::max_pool_2x2_planes(x, win, y, idx, lo, hi);
    return;
  }
  if (impl == MaxPoolImpl::Separable) {
    detail::separable_max_pool_planes(x, win, y, idx, lo, hi, options);
    return;
  }
  const int64_t hw = win.h * win.w, ohw = win.oh * win.ow;
  for (int64_t plane = lo; plane < hi; ++plane) {
    max_pool_plane(x + plane * hw, win, y + plane * ohw, idx + plane * ohw,
                   impl == MaxPoolImpl::SideBySide);
  }
}

}  // namespace

// § Note [bfloat16 pooling]
// A bfloat16 image pools plane by plane through the float32 kernels: each plane
// is widened into a float32 scratch plane that stays in cache, pooled by the
// float32 code, and the result rounded into the bf16 output. A max is exact
// (it is one of the bf16 inputs), so the forward equals the float32 forward of
// the widened image; the backward's scattered sums are float32 and rounded once,
// as are the adaptive average's. The max-pool's memory traffic is then the bf16
// image's, half float32's, with no whole-image conversion passes.
std::tuple<Tensor, Tensor> max_pool2d_forward(const Tensor& input, const IntList& kernel_size,
                                              const IntList& stride, const IntList& padding) {
  LS_DISPATCH_CUDA(input, max_pool2d_forward(input, kernel_size, stride, padding));
  const char* op = "max_pool2d";
  check_image(input, op, /*bfloat16_ok=*/true);
  const PoolWindow win = rules::max_pool2d_window(input, kernel_size, stride, padding, op);
  const int64_t n = input.size(0), c = input.size(1), h = win.h, w = win.w, oh = win.oh, ow = win.ow;
  const MaxPoolImpl impl = choose_max_pool(input, win);  // pool_dispatch.cpp
  if (impl == MaxPoolImpl::ChannelsLastBf16) {
    // A channels-last bf16 image pools in its own order (pool_max_channels_last.h).
    Tensor out = empty_channels_last({n, c, oh, ow}, kBFloat16);
    Tensor indices = empty_channels_last({n, c, oh, ow}, kInt64);
    detail::max_pool_channels_last(channels_last_rows(input).data_ptr<BFloat16>(), win, n, c,
                                   channels_last_rows(out).data_ptr<BFloat16>(),
                                   channels_last_rows(indices).data_ptr<int64_t>());
    return {out, indices};
  }
  const Tensor x = contiguous(input);
  Tensor out = empty({n, c, oh, ow}, x.dtype());  // (N, C, oH, oW)
  Tensor indices = empty({n, c, oh, ow}, kInt64);
  int64_t* ip = indices.data_ptr<int64_t>();
  if (x.dtype() == kBFloat16) {  // Note [bfloat16 pooling]
    const BFloat16* xp = x.data_ptr<BFloat16>();
    BFloat16* yp = out.data_ptr<BFloat16>();
    if (impl == MaxPoolImpl::TwoByTwo) {  // reads bf16 itself: Note [2x2 max-pool]
      parallel_for(0, n * c, plane_grain(h * w), [&](int64_t lo, int64_t hi) {
        detail::max_pool_2x2_planes(xp, win, yp, ip, lo, hi);
      });
      return {out, indices};
    }
    parallel_for(0, n * c, plane_grain(h * w), [&](int64_t lo, int64_t hi) {
      std::vector<float> xs(h * w), ys(oh * ow);  // one plane, (H, W) and (oH, oW)
      for (int64_t plane = lo; plane < hi; ++plane) {
        widen_bf16(xp + plane * h * w, xs.data(), h * w);
        max_pool_float_planes(xs.data(), win, ys.data(), ip + plane * oh * ow, 0, 1, impl, {});
        round_to_bf16(ys.data(), yp + plane * oh * ow, oh * ow);
      }
    });
    return {out, indices};
  }
  if (x.dtype() == kFloat32) {
    const float* xp = x.data_ptr<float>();
    float* yp = out.data_ptr<float>();
    detail::SeparableMaxPoolOptions options;
    options.stream_values = detail::use_streaming_stores<float>(out.numel());
    // int64 indices: the bytes of twice as many floats.
    options.stream_indices = detail::use_streaming_stores<float>(2 * indices.numel());
    parallel_for(0, n * c, plane_grain(h * w), [&](int64_t lo, int64_t hi) {
      max_pool_float_planes(xp, win, yp, ip, lo, hi, impl, options);
    });
    return {out, indices};
  }
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    const T* xp = x.data_ptr<T>();
    T* yp = out.data_ptr<T>();
    for_each_plane(n * c, h * w, [&](int64_t plane) {
      max_pool_plane(xp + plane * h * w, win, yp + plane * oh * ow, ip + plane * oh * ow,
                     impl == MaxPoolImpl::SideBySide);
    });
  });
  return {out, indices};
}

IntList max_pool2d_tile(const IntList& kernel_size, const IntList& stride, const IntList& padding) {
  const char* op = "max_pool2d";
  const auto [kh, kw] = pair_param(kernel_size, op, "kernel_size");
  const auto [sh, sw] = stride.empty() ? std::pair{kh, kw} : pair_param(stride, op, "stride");
  const auto [ph, pw] = pair_param(padding, op, "padding");
  if (sh != kh || sw != kw || ph != 0 || pw != 0) return {};
  return {kh, kw};
}

Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices,
                           const IntList& input_sizes, const IntList& tile) {
  LS_DISPATCH_CUDA(grad_output, max_pool2d_backward(grad_output, indices, input_sizes, tile));
  const char* op = "max_pool2d_backward";
  check_image(grad_output, op, /*bfloat16_ok=*/true);
  rules::check_max_pool_indices(indices, grad_output, op);
  rules::check_pool_input_sizes(input_sizes, grad_output, op);
  if (choose_max_pool_backward(grad_output, indices) == MaxPoolImpl::ChannelsLastBf16) {
    // The forward pooled a channels-last image (pool_max_channels_last.h).
    const Tensor gy = channels_last(grad_output);
    LS_CHECK(tile.empty() || (tile.size() == 2 && tile[0] > 0 && tile[1] > 0), op,
             ": tile must be empty or {kH, kW} (max_pool2d_tile) but is ", shape_str(tile));
    // The window as far as backward needs it: the tile, when the windows tile the input.
    const int64_t kh = tile.empty() ? 0 : tile[0], kw = tile.empty() ? 0 : tile[1];
    const rules::PoolWindow win{input_sizes[2], input_sizes[3], gy.size(2), gy.size(3), kh, kw, kh, kw, 0, 0};
    LS_CHECK(win.oh * kh <= win.h && win.ow * kw <= win.w, op, ": ", win.oh, "x", win.ow,
             " tiles of ", kh, "x", kw, " do not fit in the ", win.h, "x", win.w,
             " input, so this tile is not the one of the pool that made grad_output; pass that "
             "pool's max_pool2d_tile, or none");
    Tensor grad_input = empty_channels_last(input_sizes, kBFloat16);
    detail::max_pool_channels_last_backward(channels_last_rows(gy).data_ptr<BFloat16>(),
                                            channels_last_rows(indices).data_ptr<int64_t>(),
                                            win, gy.size(0), gy.size(1),
                                            channels_last_rows(grad_input).data_ptr<BFloat16>());
    return grad_input;
  }
  const Tensor gy = contiguous(grad_output), idx = contiguous(indices);
  Tensor grad_input = empty(input_sizes, gy.dtype());  // (N, C, H, W), zeroed plane by plane
  const int64_t hw = input_sizes[2] * input_sizes[3];
  const int64_t ohw = gy.size(2) * gy.size(3);
  const int64_t* ip = idx.data_ptr<int64_t>();
  if (gy.dtype() == kBFloat16) {  // Note [bfloat16 pooling]
    const BFloat16* gyp = gy.data_ptr<BFloat16>();
    BFloat16* gxp = grad_input.data_ptr<BFloat16>();
    parallel_for(0, gy.size(0) * gy.size(1), plane_grain(hw), [&](int64_t lo, int64_t hi) {
      std::vector<float> gys(ohw), gxs(hw);  // one plane, (oH, oW) and (H, W)
      for (int64_t plane = lo; plane < hi; ++plane) {
        widen_bf16(gyp + plane * ohw, gys.data(), ohw);
        detail::max_pool_scatter_planes(gys.data(), ip + plane * ohw, gxs.data(), hw, ohw, 0, 1,
                                        /*streaming=*/false);
        round_to_bf16(gxs.data(), gxp + plane * hw, hw);
      }
    });
    return grad_input;
  }
  if (gy.dtype() == kFloat32) {
    const bool streaming = detail::use_streaming_stores<float>(grad_input.numel());
    const float* gyp = gy.data_ptr<float>();
    float* gxp = grad_input.data_ptr<float>();
    parallel_for(0, gy.size(0) * gy.size(1), plane_grain(hw), [&](int64_t lo, int64_t hi) {
      detail::max_pool_scatter_planes(gyp, ip, gxp, hw, ohw, lo, hi, streaming);
    });
    return grad_input;
  }
  dispatch_floating(gy.dtype(), op, [&]<class T>() {
    const T* gyp = gy.data_ptr<T>();
    T* gxp = grad_input.data_ptr<T>();
    // Planes are disjoint, so parallel planes never write the same element; each
    // is zeroed just before its scatter, while it is in cache.
    for_each_plane(gy.size(0) * gy.size(1), hw, [&](int64_t plane) {
      T* dst = gxp + plane * hw;
      std::fill(dst, dst + hw, T(0));
      for (int64_t i = plane * ohw; i < (plane + 1) * ohw; ++i) dst[ip[i]] += gyp[i];
    });
  });
  return grad_input;
}

}  // namespace lockstep::native
