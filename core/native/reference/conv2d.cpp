// core/native/reference/conv2d.cpp — a 2-d convolution as the sum it is
// (Note [Plain reference kernels]).
//
// Every pass visits the same taps: output pixel (n, co, i, j) reads input pixel
// (n, ci, i * stride - pad + kh * dil, ...) through weight (co, ci_g, kh, kw),
// for every input channel ci of co's group. The forward sums x * w into y; the
// backward-data pass sends gy * w back to x's position; the backward-weights
// pass sums gy * x into w. A tap whose input position falls in the padding
// reads zero, so it is skipped.
// Read before: core/native/reference/reference.h. Read next: core/native/reference/matmul.cpp.
#include <vector>

#include "core/factory.h"
#include "core/native/reference/reference.h"

namespace lockstep::native::reference {

namespace {

// Calls tap(y_index, x_index, w_index) for every tap inside the input, in a
// fixed order; the indices are flat positions in contiguous y, x and w.
template <class F>
void for_each_tap(const ConvGeometry& g, F&& tap) {
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t co = 0; co < g.c_out; ++co)
      for (int64_t i = 0; i < g.oh; ++i)
        for (int64_t j = 0; j < g.ow; ++j)
          for (int64_t cig = 0; cig < g.c_in_g(); ++cig)
            for (int64_t kh = 0; kh < g.kh; ++kh)
              for (int64_t kw = 0; kw < g.kw; ++kw) {
                const int64_t h = i * g.stride_h - g.pad_h + kh * g.dil_h;
                const int64_t w = j * g.stride_w - g.pad_w + kw * g.dil_w;
                if (h < 0 || h >= g.h || w < 0 || w >= g.w) continue;    // padding: zero
                const int64_t ci = co / g.c_out_g() * g.c_in_g() + cig;  // co's group
                tap(((n * g.c_out + co) * g.oh + i) * g.ow + j,
                    ((n * g.c_in + ci) * g.h + h) * g.w + w,
                    ((co * g.c_in_g() + cig) * g.kh + kh) * g.kw + kw);
              }
}

}  // namespace

Tensor conv2d_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b) {
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> y(static_cast<size_t>(g.n * g.c_out * g.oh * g.ow), 0.0);
  if (b.defined()) {
    const std::vector<double> bv = b.to_vector<double>();
    for (size_t e = 0; e < y.size(); ++e) y[e] = bv[e / static_cast<size_t>(g.oh * g.ow) % g.c_out];
  }
  for_each_tap(g, [&](int64_t yi, int64_t xi, int64_t wi) { y[yi] += xv[xi] * wv[wi]; });
  return tensor(y, {g.n, g.c_out, g.oh, g.ow});
}

Tensor conv2d_backward_data(const ConvGeometry& g, const Tensor& gy, const Tensor& w) {
  const std::vector<double> gyv = gy.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> gx(static_cast<size_t>(g.n * g.c_in * g.h * g.w), 0.0);
  for_each_tap(g, [&](int64_t yi, int64_t xi, int64_t wi) { gx[xi] += gyv[yi] * wv[wi]; });
  return tensor(gx, {g.n, g.c_in, g.h, g.w});
}

std::tuple<Tensor, Tensor> conv2d_backward_weights(const ConvGeometry& g, const Tensor& gy,
                                                   const Tensor& x) {
  const std::vector<double> gyv = gy.to_vector<double>(), xv = x.to_vector<double>();
  std::vector<double> gw(static_cast<size_t>(g.c_out * g.c_in_g() * g.kh * g.kw), 0.0);
  for_each_tap(g, [&](int64_t yi, int64_t xi, int64_t wi) { gw[wi] += gyv[yi] * xv[xi]; });
  std::vector<double> gb(static_cast<size_t>(g.c_out), 0.0);
  for (size_t e = 0; e < gyv.size(); ++e)
    gb[e / static_cast<size_t>(g.oh * g.ow) % g.c_out] += gyv[e];
  return {tensor(gw, {g.c_out, g.c_in_g(), g.kh, g.kw}), tensor(gb, {g.c_out})};
}

}  // namespace lockstep::native::reference
