// core/native/pool.cpp — max_pool2d and adaptive_avg_pool2d, forward and backward.
//
// Both work plane by plane: an (N, C, H, W) input is N * C independent (H, W)
// planes, which run in parallel.
//
// max_pool2d: output (oy, ox) is the maximum over the window of rows
// [oy*sh - ph, oy*sh - ph + kH) and columns [ox*sw - pw, ox*sw - pw + kW),
// clipped to the plane (padding counts as -inf, so it never wins). The forward
// also returns where each maximum was, as the flat position h * W + w in its
// plane (PyTorch's indices); the backward adds each grad_output element to that
// position, so overlapping windows that share a maximum add up there.
//
// adaptive_avg_pool2d: the output size is fixed and the windows adapt to the
// input, as in PyTorch: output row i averages input rows
//     [start, end) = [floor(i * H / oh), ceil((i + 1) * H / oh)),
// and likewise for columns. Windows may overlap (H = 5, oh = 3: rows [0, 2),
// [1, 4), [3, 5)). Backward spreads grad / window_area over each window.
// Fast path: output 1x1 (ResNet's global pool) is the mean of each plane.
//
// Read before: core/native/nn_kernels.h. Read next: core/native/batch_norm.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/native/elementwise_loop.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/parallel.h"

namespace lockstep::native {

namespace {

std::string hw_str(int64_t h, int64_t w) { return lockstep::detail::str(h, "x", w); }

void check_image(const Tensor& input, const char* op) {
  lockstep::detail::check_defined(input, op);
  LS_CHECK(input.dim() == 4, op, ": expected a 4-d input (N, C, H, W) but got shape ",
           input.shape_str(), "; add a batch dim with .unsqueeze(0) for a single image");
  LS_CHECK(input.dtype() == kFloat32 || input.dtype() == kFloat64, op,
           ": expected a float32 or float64 input but got ", input.dtype(),
           "; convert with .to(ls::kFloat32)");
}

// Calls fn(plane) for each of the `planes` (H, W) planes of hw elements, in parallel.
template <class F>
void for_each_plane(int64_t planes, int64_t hw, F&& fn) {
  const int64_t grain = std::max<int64_t>(1, detail::kGrain / std::max<int64_t>(hw, 1));
  parallel_for(0, planes, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t plane = lo; plane < hi; ++plane) fn(plane);
  });
}

// PyTorch's adaptive windows: output index i of `out` covers input [start, end) of `in`.
int64_t window_start(int64_t i, int64_t in, int64_t out) { return i * in / out; }
int64_t window_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

}  // namespace

std::tuple<Tensor, Tensor> max_pool2d_forward(const Tensor& input, const IntList& kernel_size,
                                              const IntList& stride, const IntList& padding) {
  const char* op = "max_pool2d";
  check_image(input, op);
  const auto [kh, kw] = pair_param(kernel_size, op, "kernel_size");
  const auto [sh, sw] = stride.empty() ? std::pair{kh, kw} : pair_param(stride, op, "stride");
  const auto [ph, pw] = pair_param(padding, op, "padding");
  LS_CHECK(kh > 0 && kw > 0, op, ": kernel_size must be positive but got ", shape_str(kernel_size));
  LS_CHECK(sh > 0 && sw > 0, op, ": stride must be positive but got ", shape_str(stride));
  LS_CHECK(ph >= 0 && pw >= 0 && ph <= kh / 2 && pw <= kw / 2, op, ": padding ", hw_str(ph, pw),
           " must be non-negative and at most half the kernel ", hw_str(kh, kw),
           " (so every window holds a real element)");
  const int64_t n = input.size(0), c = input.size(1), h = input.size(2), w = input.size(3);
  const int64_t oh = (h + 2 * ph - kh) / sh + 1;
  const int64_t ow = (w + 2 * pw - kw) / sw + 1;
  LS_CHECK(h + 2 * ph >= kh && w + 2 * pw >= kw, op, ": input ", hw_str(h, w),
           " is too small for kernel ", hw_str(kh, kw), " with padding ",
           ph == pw ? std::to_string(ph) : hw_str(ph, pw), " (input shape ", input.shape_str(),
           "); use a larger input or a smaller kernel");
  const Tensor x = contiguous(input);
  Tensor out = empty({n, c, oh, ow}, x.dtype());  // (N, C, oH, oW)
  Tensor indices = empty({n, c, oh, ow}, kInt64);
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    const T* xp = x.data_ptr<T>();
    T* yp = out.data_ptr<T>();
    int64_t* ip = indices.data_ptr<int64_t>();
    for_each_plane(n * c, h * w, [&](int64_t plane) {
      const T* src = xp + plane * h * w;
      T* dst = yp + plane * oh * ow;
      int64_t* idx = ip + plane * oh * ow;
      for (int64_t oy = 0; oy < oh; ++oy) {
        const int64_t y0 = std::max<int64_t>(oy * sh - ph, 0);
        const int64_t y1 = std::min<int64_t>(oy * sh - ph + kh, h);
        for (int64_t ox = 0; ox < ow; ++ox) {
          const int64_t x0 = std::max<int64_t>(ox * sw - pw, 0);
          const int64_t x1 = std::min<int64_t>(ox * sw - pw + kw, w);
          T best = -std::numeric_limits<T>::infinity();
          int64_t best_at = y0 * w + x0;
          for (int64_t iy = y0; iy < y1; ++iy) {
            for (int64_t ix = x0; ix < x1; ++ix) {
              const T v = src[iy * w + ix];
              if (v > best || std::isnan(v)) {  // NaN propagates, as in PyTorch
                best = v;
                best_at = iy * w + ix;
              }
            }
          }
          dst[oy * ow + ox] = best;
          idx[oy * ow + ox] = best_at;
        }
      }
    });
  });
  return {out, indices};
}

Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices,
                           const IntList& input_sizes) {
  const char* op = "max_pool2d_backward";
  check_image(grad_output, op);
  lockstep::detail::check_defined(indices, op);
  LS_CHECK(indices.dtype() == kInt64 && indices.sizes() == grad_output.sizes(), op, ": indices (",
           indices.dtype(), " ", indices.shape_str(),
           ") must be int64 with the shape of grad_output ", grad_output.shape_str());
  LS_CHECK(input_sizes.size() == 4 && input_sizes[0] == grad_output.size(0) &&
               input_sizes[1] == grad_output.size(1),
           op, ": input shape ", shape_str(input_sizes), " does not match grad_output shape ",
           grad_output.shape_str());
  const Tensor gy = contiguous(grad_output), idx = contiguous(indices);
  Tensor grad_input = zeros(input_sizes, gy.dtype());  // (N, C, H, W)
  const int64_t hw = input_sizes[2] * input_sizes[3];
  const int64_t ohw = gy.size(2) * gy.size(3);
  dispatch_floating(gy.dtype(), op, [&]<class T>() {
    const T* gyp = gy.data_ptr<T>();
    const int64_t* ip = idx.data_ptr<int64_t>();
    T* gxp = grad_input.data_ptr<T>();
    // Planes are disjoint, so parallel planes never write the same element.
    for_each_plane(gy.size(0) * gy.size(1), hw, [&](int64_t plane) {
      T* dst = gxp + plane * hw;
      for (int64_t i = plane * ohw; i < (plane + 1) * ohw; ++i) dst[ip[i]] += gyp[i];
    });
  });
  return grad_input;
}

namespace {

std::pair<int64_t, int64_t> adaptive_output_size(const IntList& output_size, const char* op) {
  const auto [oh, ow] = pair_param(output_size, op, "output_size");
  LS_CHECK(oh > 0 && ow > 0, op, ": output_size must be positive but got ", shape_str(output_size));
  return {oh, ow};
}

}  // namespace

Tensor adaptive_avg_pool2d_forward(const Tensor& input, const IntList& output_size) {
  const char* op = "adaptive_avg_pool2d";
  check_image(input, op);
  const auto [oh, ow] = adaptive_output_size(output_size, op);
  const int64_t n = input.size(0), c = input.size(1), h = input.size(2), w = input.size(3);
  LS_CHECK(h > 0 && w > 0, op, ": input ", input.shape_str(), " has an empty plane");
  const Tensor x = contiguous(input);
  Tensor out = empty({n, c, oh, ow}, x.dtype());  // (N, C, oh, ow)
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    const T* xp = x.data_ptr<T>();
    T* yp = out.data_ptr<T>();
    for_each_plane(n * c, h * w, [&](int64_t plane) {
      const T* src = xp + plane * h * w;
      T* dst = yp + plane * oh * ow;
      if (oh == 1 && ow == 1) {  // fast path: the mean of the plane
        double s = 0;
        for (int64_t i = 0; i < h * w; ++i) s += src[i];
        dst[0] = static_cast<T>(s / static_cast<double>(h * w));
        return;
      }
      for (int64_t oy = 0; oy < oh; ++oy) {
        const int64_t y0 = window_start(oy, h, oh), y1 = window_end(oy, h, oh);
        for (int64_t ox = 0; ox < ow; ++ox) {
          const int64_t x0 = window_start(ox, w, ow), x1 = window_end(ox, w, ow);
          double s = 0;
          for (int64_t iy = y0; iy < y1; ++iy) {
            for (int64_t ix = x0; ix < x1; ++ix) s += src[iy * w + ix];
          }
          dst[oy * ow + ox] = static_cast<T>(s / static_cast<double>((y1 - y0) * (x1 - x0)));
        }
      }
    });
  });
  return out;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const IntList& input_sizes) {
  const char* op = "adaptive_avg_pool2d_backward";
  check_image(grad_output, op);
  LS_CHECK(input_sizes.size() == 4 && input_sizes[0] == grad_output.size(0) &&
               input_sizes[1] == grad_output.size(1),
           op, ": input shape ", shape_str(input_sizes), " does not match grad_output shape ",
           grad_output.shape_str());
  const Tensor gy = contiguous(grad_output);
  const int64_t h = input_sizes[2], w = input_sizes[3];
  const int64_t oh = gy.size(2), ow = gy.size(3);
  Tensor grad_input = zeros(input_sizes, gy.dtype());  // (N, C, H, W)
  dispatch_floating(gy.dtype(), op, [&]<class T>() {
    const T* gyp = gy.data_ptr<T>();
    T* gxp = grad_input.data_ptr<T>();
    for_each_plane(gy.size(0) * gy.size(1), h * w, [&](int64_t plane) {
      const T* src = gyp + plane * oh * ow;
      T* dst = gxp + plane * h * w;
      for (int64_t oy = 0; oy < oh; ++oy) {
        const int64_t y0 = window_start(oy, h, oh), y1 = window_end(oy, h, oh);
        for (int64_t ox = 0; ox < ow; ++ox) {
          const int64_t x0 = window_start(ox, w, ow), x1 = window_end(ox, w, ow);
          const T share = src[oy * ow + ox] / static_cast<T>((y1 - y0) * (x1 - x0));
          for (int64_t iy = y0; iy < y1; ++iy) {
            for (int64_t ix = x0; ix < x1; ++ix) dst[iy * w + ix] += share;
          }
        }
      }
    });
  });
  return grad_input;
}

}  // namespace lockstep::native
