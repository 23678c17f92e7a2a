// core/native/reference/normalization.cpp — batch norm and layer norm as the
// one computation they are (Note [Plain reference kernels]): split the elements
// into groups, subtract each group's mean, divide by sqrt(its biased variance
// + eps), then scale and shift by an affine parameter. Batch norm's groups are
// the channels of x (N, C, *) and its parameter is the channel's; layer norm's
// groups are the rows of x (M, D) and its parameter is the column's.
// The backward through the group statistics, with g = gy * w and x^ the
// normalised input, over a group of m elements:
//   dL/dx = invstd / m * (m g - sum(g) - x^ sum(g x^)),  dL/dw += gy x^,  dL/db += gy.
// Read before: core/native/reference/matmul.cpp. Read next: core/native/reference/pool.cpp.
#include <cmath>
#include <vector>

#include "core/factory.h"
#include "core/native/reference/reference.h"

namespace lockstep::native::reference {

namespace {

// How elements fall into groups: group(e) and param(e) for element e of a contiguous x.
struct Groups {
  int64_t count, params, inner,
      channels;  // batch norm: C groups of (N, *); layer norm: M rows of D
  bool by_channel;
  int64_t group(int64_t e) const { return by_channel ? e / inner % channels : e / inner; }
  int64_t param(int64_t e) const { return by_channel ? group(e) : e % inner; }
};

Groups batch_norm_groups(const Tensor& x) {
  return {x.size(1), x.size(1), x.numel() / (x.size(0) * x.size(1)), x.size(1), true};
}
Groups layer_norm_groups(const Tensor& x, int64_t d) { return {x.numel() / d, d, d, 0, false}; }

// mean and invstd (count) of x's groups.
std::tuple<std::vector<double>, std::vector<double>> moments(const Groups& g,
                                                             const std::vector<double>& x,
                                                             double eps) {
  std::vector<double> mean(g.count, 0.0), var(g.count, 0.0), invstd(g.count);
  const double m = static_cast<double>(x.size()) / static_cast<double>(g.count);
  for (size_t e = 0; e < x.size(); ++e) mean[g.group(e)] += x[e] / m;
  for (size_t e = 0; e < x.size(); ++e)
    var[g.group(e)] += (x[e] - mean[g.group(e)]) * (x[e] - mean[g.group(e)]) / m;
  for (int64_t c = 0; c < g.count; ++c) invstd[c] = 1.0 / std::sqrt(var[c] + eps);
  return {mean, invstd};
}

std::vector<double> values_or(const Tensor& t, int64_t n, double fill) {
  return t.defined() ? t.to_vector<double>() : std::vector<double>(n, fill);
}

std::tuple<Tensor, Tensor, Tensor> forward(const Groups& g, const Tensor& x, const Tensor& w,
                                           const Tensor& b, double eps) {
  const std::vector<double> xv = x.to_vector<double>(), wv = values_or(w, g.params, 1.0),
                            bv = values_or(b, g.params, 0.0);
  auto [mean, invstd] = moments(g, xv, eps);
  std::vector<double> y(xv.size());
  for (size_t e = 0; e < xv.size(); ++e)
    y[e] = (xv[e] - mean[g.group(e)]) * invstd[g.group(e)] * wv[g.param(e)] + bv[g.param(e)];
  return {tensor(y, x.sizes()), tensor(mean, {g.count}), tensor(invstd, {g.count})};
}

std::tuple<Tensor, Tensor, Tensor> backward(const Groups& g, const Tensor& gy, const Tensor& x,
                                            const Tensor& w, double eps) {
  const std::vector<double> xv = x.to_vector<double>(), gyv = gy.to_vector<double>(),
                            wv = values_or(w, g.params, 1.0);
  auto [mean, invstd] = moments(g, xv, eps);
  const double m = static_cast<double>(xv.size()) / static_cast<double>(g.count);
  std::vector<double> xhat(xv.size()), sum_g(g.count, 0.0), sum_gx(g.count, 0.0);
  std::vector<double> gx(xv.size()), gw(g.params, 0.0), gb(g.params, 0.0);
  for (size_t e = 0; e < xv.size(); ++e) {
    xhat[e] = (xv[e] - mean[g.group(e)]) * invstd[g.group(e)];
    sum_g[g.group(e)] += gyv[e] * wv[g.param(e)];
    sum_gx[g.group(e)] += gyv[e] * wv[g.param(e)] * xhat[e];
    gw[g.param(e)] += gyv[e] * xhat[e];
    gb[g.param(e)] += gyv[e];
  }
  for (size_t e = 0; e < xv.size(); ++e) {
    const int64_t c = g.group(e);
    gx[e] = invstd[c] / m * (m * gyv[e] * wv[g.param(e)] - sum_g[c] - xhat[e] * sum_gx[c]);
  }
  return {tensor(gx, x.sizes()), tensor(gw, {g.params}), tensor(gb, {g.params})};
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> batch_norm_forward(const Tensor& x, const Tensor& w,
                                                      const Tensor& b, double eps) {
  return forward(batch_norm_groups(x), x, w, b, eps);
}
std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& gy, const Tensor& x,
                                                       const Tensor& w, double eps) {
  return backward(batch_norm_groups(x), gy, x, w, eps);
}
std::tuple<Tensor, Tensor, Tensor> layer_norm_forward(const Tensor& x, int64_t d, const Tensor& w,
                                                      const Tensor& b, double eps) {
  return forward(layer_norm_groups(x, d), x, w, b, eps);
}
std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& gy, const Tensor& x, int64_t d,
                                                       const Tensor& w, double eps) {
  return backward(layer_norm_groups(x, d), gy, x, w, eps);
}

}  // namespace lockstep::native::reference
