// core/native/softmax_rows.h — the two row reductions of a (log-)softmax: the row's
// maximum m and log(sum_j exp(x_j - m)).
//
// softmax.cpp's rows and cross_entropy's bf16 rows (loss.cpp) both call these, so
// a log-probability computed either way, (x_j - m) - log_sum_exp, is the same float
// (Note [float32 ops reading bfloat16 in place] in autograd/functions/autocast_ops.h).
//
// Read before: core/native/elementwise_loop.h. Read next: core/native/softmax.cpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/native/elementwise_loop.h"

namespace lockstep::native::detail {

template <class T>
T row_max(const T* x, int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;  // ignores NaN, but a NaN input then makes the whole row NaN, as it should
}

// log(sum_i exp(x_i - m)) for the row's maximum m, summed in double.
template <class T>
T row_log_sum_exp(const T* x, int64_t n, T m) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += exp_simd(x[i] - m);
  return static_cast<T>(std::log(s));
}

}  // namespace lockstep::native::detail
