// core/native/reference/softmax.cpp — softmax along a dim, and the
// cross-entropy loss built on its log (Note [Plain reference kernels]).
// A tensor seen along `dim` is (outer, D, inner): element (o, d, i) sits at
// (o * D + d) * inner + i, and each of the outer * inner lines of D elements is
// normalised on its own. Subtracting the line's maximum first changes nothing
// mathematically and keeps exp() from overflowing.
// Read before: core/native/reference/pool.cpp. Read next: tests/core/test_reference_conv.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/factory.h"
#include "core/native/reference/reference.h"

namespace lockstep::native::reference {

namespace {

struct Lines {
  int64_t outer = 1, d = 1, inner = 1;
  int64_t at(int64_t line, int64_t k) const {
    return (line / inner * d + k) * inner + line % inner;
  }
};

Lines lines_of(const Tensor& t, int64_t dim) {
  Lines l;
  for (int64_t i = 0; i < dim; ++i) l.outer *= t.size(i);
  l.d = t.size(dim);
  for (int64_t i = dim + 1; i < t.dim(); ++i) l.inner *= t.size(i);
  return l;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim, bool log) {
  const Lines l = lines_of(x, dim);
  const std::vector<double> xv = x.to_vector<double>();
  std::vector<double> y(xv.size());
  for (int64_t line = 0; line < l.outer * l.inner; ++line) {
    double max = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t k = 0; k < l.d; ++k) max = std::max(max, xv[l.at(line, k)]);
    for (int64_t k = 0; k < l.d; ++k) sum += std::exp(xv[l.at(line, k)] - max);
    for (int64_t k = 0; k < l.d; ++k) {
      const double shifted = xv[l.at(line, k)] - max;
      y[l.at(line, k)] = log ? shifted - std::log(sum) : std::exp(shifted) / sum;
    }
  }
  return tensor(y, x.sizes());
}

Tensor softmax_backward(const Tensor& gy, const Tensor& y, int64_t dim) {
  const Lines l = lines_of(y, dim);
  const std::vector<double> gyv = gy.to_vector<double>(), yv = y.to_vector<double>();
  std::vector<double> gx(yv.size());
  for (int64_t line = 0; line < l.outer * l.inner; ++line) {
    double dot = 0;
    for (int64_t k = 0; k < l.d; ++k) dot += gyv[l.at(line, k)] * yv[l.at(line, k)];
    for (int64_t k = 0; k < l.d; ++k)
      gx[l.at(line, k)] = yv[l.at(line, k)] * (gyv[l.at(line, k)] - dot);
  }
  return tensor(gx, y.sizes());
}

Tensor cross_entropy_forward(const Tensor& logits, const Tensor& target, int64_t ignore_index) {
  const int64_t c = logits.size(1);
  const std::vector<double> log_p = softmax(logits, 1, /*log=*/true).to_vector<double>();
  const std::vector<int64_t> t = target.to_vector<int64_t>();
  double sum = 0, count = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == ignore_index) continue;
    sum -= log_p[i * c + t[i]];
    count += 1;
  }
  return scalar_tensor(sum / count, TensorOptions().dtype(kFloat64));  // 0 / 0 = NaN: all ignored
}

Tensor cross_entropy_backward(double grad, const Tensor& logits, const Tensor& target,
                              int64_t ignore_index) {
  const int64_t c = logits.size(1);
  std::vector<double> g = softmax(logits, 1, /*log=*/false).to_vector<double>();
  const std::vector<int64_t> t = target.to_vector<int64_t>();
  double count = 0;
  for (int64_t ti : t) count += ti != ignore_index;
  for (size_t i = 0; i < t.size(); ++i)
    for (int64_t k = 0; k < c; ++k) {
      double& v = g[i * c + k];
      v = t[i] == ignore_index ? 0.0 : (v - (k == t[i])) * grad / count;
    }
  return tensor(g, logits.sizes());
}

}  // namespace lockstep::native::reference
