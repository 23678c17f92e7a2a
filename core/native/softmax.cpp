// core/native/softmax.cpp — softmax, log_softmax and their backward, over any dim.
//
// For one row x of length n (the dim being normalised), with m = max_i x_i:
//   softmax(x)_i     = exp(x_i - m) / sum_j exp(x_j - m)
//   log_softmax(x)_i = x_i - m - log(sum_j exp(x_j - m))
// Subtracting m changes nothing mathematically but keeps exp from overflowing
// (every exponent is <= 0, and the largest term is exactly 1).
// Backward, given y = the forward output and g = dL/dy:
//   softmax:     dL/dx = y * (g - sum_j g_j y_j)
//   log_softmax: dL/dx = g - exp(y) * sum_j g_j
// Sums accumulate in double; exp is the vectorisable one of elementwise_loop.h
// (see Note [Vectorisable exp and erf]).
//
// The kernels work on contiguous rows: the fast path is dim == last on a
// contiguous tensor (attention scores, class logits). Any other dim is first
// swapped with the last one (a transposed copy), and the result swapped back.
//
// Under bf16 autocast the policy computes softmax in float32; softmax_bf16_input and
// its backward below read the bfloat16 input in place and write its gradient in
// bfloat16 (Note [float32 ops reading bfloat16 in place] in
// autograd/functions/autocast_ops.h): the same row functions, the same values as the
// cast followed by the float32 kernel, bit for bit.
//
// Read before: core/native/reduce.cpp. Read next: core/native/linalg.cpp.
#include <cmath>
#include <limits>
#include <vector>

#include "core/native/bf16_rows.h"

#include "core/native/elementwise_loop.h"
#include "core/native/cuda_dispatch.h"
#include "core/native/native.h"
#include "core/native/reduce_rules.h"
#include "core/native/softmax_rows.h"

namespace lockstep::native {

using rules::check_defined;
using rules::check_softmax_backward;

namespace {

// y = softmax(x) or log_softmax(x) of one row.
template <class T>
void softmax_row(const T* x, T* y, int64_t n, bool log) {
  const T m = detail::row_max(x, n);
  if (log) {
    // (x - m) - log s, not x - (m + log s): x - m is exact, m + log s is not.
    const T log_s = detail::row_log_sum_exp(x, n, m);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) - log_s;
  } else {
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) {
      y[i] = detail::exp_simd(x[i] - m);
      s += y[i];
    }
    const T inv = static_cast<T>(1.0 / s);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}

// gi = dL/dx of one row, from g = dL/dy and the forward output y.
template <class T>
void softmax_backward_row(const T* g, const T* y, T* gi, int64_t n, bool log) {
  double s = 0;
  if (log) {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += g[i];
    const T sum_g = static_cast<T>(s);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) gi[i] = g[i] - detail::exp_simd(y[i]) * sum_g;
  } else {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(g[i]) * y[i];
    const T dot = static_cast<T>(s);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) gi[i] = y[i] * (g[i] - dot);
  }
}

// Calls fn(r) for each of the numel / n rows of length n, in parallel.
template <class F>
void for_each_row(int64_t numel, int64_t n, F&& fn) {
  const int64_t rows = n == 0 ? 0 : numel / n;
  const int64_t grain = std::max<int64_t>(1, detail::kGrain / std::max<int64_t>(n, 1));
  parallel_for(0, rows, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) fn(r);
  });
}

int64_t last_dim(const Tensor& t) { return std::max<int64_t>(t.dim() - 1, 0); }
int64_t row_length(const Tensor& t) { return t.dim() == 0 ? 1 : t.size(-1); }

Tensor softmax_impl(const Tensor& t, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  check_defined(t, op);
  const int64_t d = wrap_dim(dim, t.dim(), op);
  const int64_t last = last_dim(t);
  if (d != last) {
    // Make dim the last one, normalise rows, swap back (transpose is its own inverse).
    return contiguous(transpose(softmax_impl(transpose(t, d, last), last, log), d, last));
  }
  const Tensor x = contiguous(t);
  Tensor y = empty(x.sizes(), x.dtype());
  const int64_t n = row_length(x);
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    const T* xp = x.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    for_each_row(x.numel(), n, [&](int64_t r) { softmax_row(xp + r * n, yp + r * n, n, log); });
  });
  return y;
}

Tensor softmax_backward_impl(const Tensor& grad_output, const Tensor& output, int64_t dim,
                             bool log) {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  check_softmax_backward(grad_output, output, op, [] {});
  const int64_t d = wrap_dim(dim, output.dim(), op);
  const int64_t last = last_dim(output);
  if (d != last) {
    return contiguous(transpose(softmax_backward_impl(transpose(grad_output, d, last),
                                                      transpose(output, d, last), last, log),
                                d, last));
  }
  const Tensor y = contiguous(output);
  const Tensor g = contiguous(to_dtype(grad_output, output.dtype()));
  Tensor gi = empty(y.sizes(), y.dtype());
  const int64_t n = row_length(y);
  dispatch_floating(y.dtype(), op, [&]<class T>() {
    const T* gp = g.data_ptr<T>();
    const T* yp = y.data_ptr<T>();
    T* gip = gi.data_ptr<T>();
    for_each_row(y.numel(), n, [&](int64_t r) {
      softmax_backward_row(gp + r * n, yp + r * n, gip + r * n, n, log);
    });
  });
  return gi;
}

// Whether the bf16 forms below can work on t's rows in place: bf16, softmax
// along the last dim of a contiguous tensor (the attention scores). Any other
// tensor takes the cast and the float32 kernel, which give the same values.
bool bf16_rows_in_place(const Tensor& t, int64_t dim, const char* op) {
  check_defined(t, op);
  return t.dtype() == kBFloat16 && t.dim() > 0 && wrap_dim(dim, t.dim(), op) == last_dim(t) &&
         t.is_contiguous();
}

}  // namespace

Tensor softmax_bf16_input(const Tensor& t, int64_t dim, bool log) {
  if (!bf16_rows_in_place(t, dim, log ? "log_softmax" : "softmax")) {
    return softmax_impl(to_dtype(t, kFloat32), dim, log);
  }
  Tensor y = empty(t.sizes(), kFloat32);  // float32, like the policy's float32 op
  const BFloat16* xp = t.data_ptr<BFloat16>();
  float* yp = y.data_ptr<float>();
  const int64_t n = row_length(t);
  for_each_row(t.numel(), n, [&](int64_t r) {
    widen_bf16(xp + r * n, yp + r * n, n);        // the cast, row by row, into y
    softmax_row(yp + r * n, yp + r * n, n, log);  // in place: each y[i] read before written
  });
  return y;
}

Tensor softmax_backward_bf16_input(const Tensor& grad_output, const Tensor& output, int64_t dim,
                                   bool log) {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  check_softmax_backward(grad_output, output, op, [] {});
  const bool rows = output.dtype() == kFloat32 && output.dim() > 0 &&
                    wrap_dim(dim, output.dim(), op) == last_dim(output) && output.is_contiguous();
  if (!rows) return to_dtype(softmax_backward_impl(grad_output, output, dim, log), kBFloat16);
  const Tensor g = contiguous(to_dtype(grad_output, kFloat32));
  Tensor gi = empty(output.sizes(), kBFloat16);  // dL/dx in the input's dtype
  const float* gp = g.data_ptr<float>();
  const float* yp = output.data_ptr<float>();
  BFloat16* gip = gi.data_ptr<BFloat16>();
  const int64_t n = row_length(output);
  for_each_row(output.numel(), n, [&](int64_t r) {
    thread_local std::vector<float> row;  // the float32 gradient of one row
    row.resize(static_cast<size_t>(n));
    softmax_backward_row(gp + r * n, yp + r * n, row.data(), n, log);
    round_to_bf16(row.data(), gip + r * n, n);  // the rounding ToCopyBackward would do
  });
  return gi;
}

Tensor softmax(const Tensor& t, int64_t dim) {
  LS_DISPATCH_CUDA(t, softmax(t, dim));
  return softmax_impl(t, dim, /*log=*/false);
}

Tensor log_softmax(const Tensor& t, int64_t dim) {
  LS_DISPATCH_CUDA(t, log_softmax(t, dim));
  return softmax_impl(t, dim, /*log=*/true);
}

Tensor softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  LS_DISPATCH_CUDA(grad_output, softmax_backward(grad_output, output, dim));
  LS_DISPATCH_CUDA(output, softmax_backward(grad_output, output, dim));
  return softmax_backward_impl(grad_output, output, dim, /*log=*/false);
}

Tensor log_softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  LS_DISPATCH_CUDA(grad_output, log_softmax_backward(grad_output, output, dim));
  LS_DISPATCH_CUDA(output, log_softmax_backward(grad_output, output, dim));
  return softmax_backward_impl(grad_output, output, dim, /*log=*/true);
}

}  // namespace lockstep::native
