// core/native/layer_norm.cpp — layer normalisation over the trailing dims, and its backward.
//
// The input (*, normalized_shape) is read as M rows of D = prod(normalized_shape)
// contiguous elements. For one row x, with w and b the (optional) affine parameters:
//   mean = sum_j x_j / D
//   var  = sum_j (x_j - mean)^2 / D              (biased, as PyTorch)
//   rstd = 1 / sqrt(var + eps)
//   xhat = (x - mean) * rstd,   y = xhat * w + b
// The statistics use two passes over the row (mean first, then the squared
// deviations from it) with double accumulators: the second pass never subtracts
// two large sums, so there is no cancellation when |mean| >> std, and double
// sums keep the rounding error of long rows far below float32 precision. The
// row is in cache for the second pass. mean and rstd (M) are returned for backward.
//
// Backward, with g = dL/dy and gy = g * w (g when there is no weight):
//   dx_j = rstd * (gy_j - mean_k(gy_k) - xhat_j * mean_k(gy_k * xhat_k))
//   dw_j = sum over rows of g_j * xhat_j,     db_j = sum over rows of g_j
// dx is computed per row, rows in parallel. dw and db sum over rows, so they run
// in parallel over column blocks instead: each thread owns a block of columns and
// walks every row, which needs no atomics and gives results that do not depend
// on the thread count.
//
// Read before: core/native/nn_kernels_transformer.h. Read next: core/native/embedding.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/native/cuda_dispatch.h"
#include "core/native/elementwise_loop.h"
#include "core/native/layer_norm_rows.h"
#include "core/native/layer_norm_rules.h"
#include "core/native/native.h"
#include "core/native/nn_kernels_transformer.h"

namespace lockstep::native {

using rules::num_rows;
using rules::row_length;

namespace {

void check_layer_norm(const Tensor& input, const IntList& normalized_shape, const Tensor& weight,
                      const Tensor& bias) {
  rules::check_layer_norm(input, normalized_shape, weight, bias, "layer_norm", [] {});
}

// Rows (of n elements) per parallel chunk, so a chunk holds about kGrain elements.
int64_t row_grain(int64_t n) {
  return std::max<int64_t>(1, detail::kGrain / std::max<int64_t>(n, 1));
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> layer_norm_forward(const Tensor& input,
                                                      const IntList& normalized_shape,
                                                      const Tensor& weight, const Tensor& bias,
                                                      double eps) {
  LS_DISPATCH_CUDA(input, layer_norm_forward(input, normalized_shape, weight, bias, eps));
  check_layer_norm(input, normalized_shape, weight, bias);
  const int64_t d = row_length(normalized_shape), m = num_rows(input, normalized_shape);
  const Tensor x = contiguous(input);  // (M, D)
  Tensor y = empty(input.sizes(), input.dtype());
  Tensor mean = empty({m}, input.dtype());                            // (M)
  Tensor rstd = empty({m}, input.dtype());                            // (M)
  const Tensor w = weight.defined() ? contiguous(weight) : Tensor();  // (D)
  const Tensor b = bias.defined() ? contiguous(bias) : Tensor();      // (D)
  dispatch_floating(input.dtype(), "layer_norm", [&]<class T>() {
    const T* xp = x.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    T* mp = mean.data_ptr<T>();
    T* rp = rstd.data_ptr<T>();
    const T* wp = w.defined() ? w.data_ptr<T>() : nullptr;
    const T* bp = b.defined() ? b.data_ptr<T>() : nullptr;
    parallel_for(0, m, row_grain(d), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        layer_norm_row(xp + i * d, yp + i * d, d, wp, bp, eps, mp[i], rp[i]);
      }
    });
  });
  return {y, mean, rstd};
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& grad_output,
                                                       const Tensor& input,
                                                       const IntList& normalized_shape,
                                                       const Tensor& mean, const Tensor& rstd,
                                                       const Tensor& weight, bool need_input,
                                                       bool need_weight, bool need_bias) {
  LS_DISPATCH_CUDA(input, layer_norm_backward(grad_output, input, normalized_shape, mean, rstd,
                                              weight, need_input, need_weight, need_bias));
  check_layer_norm(input, normalized_shape, weight, Tensor());
  rules::check_backward_grad(grad_output, input, "layer_norm_backward");
  const int64_t d = row_length(normalized_shape), m = num_rows(input, normalized_shape);
  rules::check_backward_stats(mean, rstd, m, "layer_norm_backward");
  const ScalarType dtype = input.dtype();
  const Tensor x = contiguous(input);                                 // (M, D)
  const Tensor g = contiguous(to_dtype(grad_output, dtype));          // (M, D)
  const Tensor mu = contiguous(to_dtype(mean, dtype));                // (M)
  const Tensor rs = contiguous(to_dtype(rstd, dtype));                // (M)
  const Tensor w = weight.defined() ? contiguous(weight) : Tensor();  // (D)
  Tensor grad_input, grad_weight, grad_bias;
  if (need_input) grad_input = empty(input.sizes(), dtype);
  if (need_weight && weight.defined()) grad_weight = empty(normalized_shape, dtype);
  if (need_bias) grad_bias = empty(normalized_shape, dtype);

  dispatch_floating(dtype, "layer_norm_backward", [&]<class T>() {
    const T* xp = x.data_ptr<T>();
    const T* gp = g.data_ptr<T>();
    const T* mp = mu.data_ptr<T>();
    const T* rp = rs.data_ptr<T>();
    const T* wp = w.defined() ? w.data_ptr<T>() : nullptr;

    if (grad_input.defined()) {
      T* dxp = grad_input.data_ptr<T>();
      parallel_for(0, m, row_grain(d), [&](int64_t lo, int64_t hi) {
        std::vector<T> gy(static_cast<size_t>(d));  // g * w of one row
        for (int64_t i = lo; i < hi; ++i) {
          layer_norm_row_backward(xp + i * d, gp + i * d, mp[i], rp[i], wp, gy.data(),
                                  dxp + i * d, d);
        }
      });
    }

    if (grad_weight.defined() || grad_bias.defined()) {
      T* dwp = grad_weight.defined() ? grad_weight.data_ptr<T>() : nullptr;
      T* dbp = grad_bias.defined() ? grad_bias.data_ptr<T>() : nullptr;
      parallel_for(0, d, row_grain(m), [&](int64_t lo, int64_t hi) {  // a block of columns
        layer_norm_param_grads(xp, gp, mp, rp, m, d, lo, hi, dwp, dbp);
      });
    }
  });
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace lockstep::native
