// core/native/layer_norm_rows.h — layer norm's arithmetic on one row, and its
// weight and bias gradients over a block of columns: the loops of
// core/native/layer_norm.cpp (whose header states the formulas), written once so
// that the fused kernels that normalise a row in the pass that made it
// (core/native/fused_dropout.cpp) compute the same bits as layer_norm itself.
//
// Read before: core/native/layer_norm.cpp. Read next: core/native/fused_dropout.cpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace lockstep::native {

// out = (row - mean) * rstd * w + b over one row of d elements (w, b may be null);
// sets mean and rstd (the row's statistics, in double, then rounded to T).
template <class T>
inline void layer_norm_row(const T* row, T* out, int64_t d, const T* wp, const T* bp, double eps,
                           T& mean, T& rstd) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < d; ++j) s += row[j];
  const double mu = s / static_cast<double>(d);
  double sq = 0;
#pragma omp simd reduction(+ : sq)
  for (int64_t j = 0; j < d; ++j) sq += (row[j] - mu) * (row[j] - mu);
  const double r = 1.0 / std::sqrt(sq / static_cast<double>(d) + eps);
  mean = static_cast<T>(mu);
  rstd = static_cast<T>(r);
  const T mu_t = mean, r_t = rstd;
  if (wp && bp) {
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) out[j] = (row[j] - mu_t) * r_t * wp[j] + bp[j];
  } else if (wp) {
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) out[j] = (row[j] - mu_t) * r_t * wp[j];
  } else if (bp) {
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) out[j] = (row[j] - mu_t) * r_t + bp[j];
  } else {
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) out[j] = (row[j] - mu_t) * r_t;
  }
}

// dx of one row from its forward input `row`, the incoming gradient `grow` and the
// row's statistics; gy is scratch of d elements (g * w). wp may be null.
template <class T>
inline void layer_norm_row_backward(const T* row, const T* grow, T mu_i, T r_i, const T* wp,
                                    T* gy, T* dx, int64_t d) {
  double sum_gy = 0, sum_gy_xhat = 0;
  for (int64_t j = 0; j < d; ++j) {
    gy[j] = wp ? grow[j] * wp[j] : grow[j];
    sum_gy += gy[j];
    sum_gy_xhat += static_cast<double>(gy[j]) * ((row[j] - mu_i) * r_i);
  }
  const T a = static_cast<T>(sum_gy / static_cast<double>(d));
  const T c = static_cast<T>(sum_gy_xhat / static_cast<double>(d));
#pragma omp simd
  for (int64_t j = 0; j < d; ++j) dx[j] = r_i * (gy[j] - a - (row[j] - mu_i) * r_i * c);
}

// dw[j] = sum_i g[i][j] * xhat[i][j] and db[j] = sum_i g[i][j] for the columns lo..hi
// of m rows of d (either pointer may be null), summed in double down the rows.
template <class T>
inline void layer_norm_param_grads(const T* xp, const T* gp, const T* mp, const T* rp, int64_t m,
                                   int64_t d, int64_t lo, int64_t hi, T* dwp, T* dbp) {
  std::vector<double> acc_w(static_cast<size_t>(hi - lo), 0.0);
  std::vector<double> acc_b(static_cast<size_t>(hi - lo), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    const T* row = xp + i * d;
    const T* grow = gp + i * d;
    const T mu_i = mp[i], r_i = rp[i];
    for (int64_t j = lo; j < hi; ++j) {
      acc_w[j - lo] += static_cast<double>(grow[j]) * ((row[j] - mu_i) * r_i);
      acc_b[j - lo] += grow[j];
    }
  }
  for (int64_t j = lo; j < hi; ++j) {
    if (dwp) dwp[j] = static_cast<T>(acc_w[j - lo]);
    if (dbp) dbp[j] = static_cast<T>(acc_b[j - lo]);
  }
}

}  // namespace lockstep::native
