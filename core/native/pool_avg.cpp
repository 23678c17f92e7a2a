// core/native/pool_avg.cpp — adaptive_avg_pool2d, forward and backward.
//
// The output size is fixed and the windows adapt to the input, as in PyTorch:
// output row i averages input rows
//     [start, end) = [floor(i * H / oh), ceil((i + 1) * H / oh)),
// and likewise for columns. Windows may overlap (H = 5, oh = 3: rows [0, 2),
// [1, 4), [3, 5)). Backward spreads grad / window_area over each window. Each
// (H, W) plane of an (N, C, H, W) input is independent; the planes run in
// parallel. Fast path: output 1x1 (ResNet's global pool) is the mean of each
// plane, summed in double. bfloat16 runs through float32 (Note [bfloat16
// pooling], pool.cpp).
//
// Read before: core/native/nn_kernels.h, core/native/pool.cpp.
#include "core/native/cuda_dispatch.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/native/pool_planes.h"
#include "core/native/pool_rules.h"

namespace lockstep::native {

namespace {

// PyTorch's adaptive windows: output index i of `out` covers input [start, end) of `in`.
int64_t window_start(int64_t i, int64_t in, int64_t out) { return i * in / out; }
int64_t window_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

using pool_detail::for_each_plane;

}  // namespace

Tensor adaptive_avg_pool2d_forward(const Tensor& input, const IntList& output_size) {
  LS_DISPATCH_CUDA(input, adaptive_avg_pool2d_forward(input, output_size));
  if (input.defined() && input.dtype() == kBFloat16) {  // Note [bfloat16 pooling]
    return to_dtype(adaptive_avg_pool2d_forward(to_dtype(input, kFloat32), output_size), kBFloat16);
  }
  const char* op = "adaptive_avg_pool2d";
  rules::check_image(input, op, [] {});
  const auto [oh, ow] = rules::adaptive_output_size(output_size, op);
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
  LS_DISPATCH_CUDA(grad_output, adaptive_avg_pool2d_backward(grad_output, input_sizes));
  if (grad_output.defined() && grad_output.dtype() == kBFloat16) {  // Note [bfloat16 pooling]
    return to_dtype(adaptive_avg_pool2d_backward(to_dtype(grad_output, kFloat32), input_sizes),
                    kBFloat16);
  }
  const char* op = "adaptive_avg_pool2d_backward";
  rules::check_image(grad_output, op, [] {});
  rules::check_pool_input_sizes(input_sizes, grad_output, op);
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
