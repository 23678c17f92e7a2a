// core/native/loss.cpp — the training losses: cross_entropy and mse_loss.
//
// cross_entropy(logits (N, C), target (N)) is log_softmax followed by the negative
// log-likelihood of each row's target class, averaged over the rows that count:
//   lp = log_softmax(logits, 1)                     (N, C)
//   loss = -sum_{i: t_i != ignore} lp[i, t_i] / count,   count = #{i: t_i != ignore}
// It is one op (one autograd node) rather than three, because the backward of the
// whole chain collapses to one cheap formula on the saved lp:
//   dL/dlogits[i, j] = (exp(lp[i, j]) - [j == t_i]) * grad / count
// and zero rows where t_i is ignored. lp comes from native::log_softmax (max-shifted,
// so large logits do not overflow). When every row is ignored, count is 0 and the
// loss is 0 / 0 = NaN, as in PyTorch 1.13; its gradient is then all zeros (no row
// counts), again as PyTorch gives.
//
// mse_loss(x, y) = sum (x - y)^2 / n over all n elements; dL/dx = 2 (x - y) grad / n.
//
// Sums accumulate in double and in a fixed order (row order; fixed blocks of
// kGrain elements for mse_loss), so results do not depend on the thread count.
//
// Under bf16 autocast (CPU) the bf16 forms read the logits in place and save, per row,
// the maximum m and log_sum_exp instead of float32 log-probabilities; backward
// recomputes lp = (x - m) - log_sum_exp as the float32 kernel computed it and writes
// the gradient rounded to bf16 (Note [float32 ops reading bfloat16 in place] in
// autograd/functions/autocast_ops.h).
//
// Read before: core/native/softmax.cpp. Read next: autograd/functions/loss.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/native/bf16_rows.h"
#include "core/native/softmax_rows.h"

#include "core/native/cuda_dispatch.h"
#include "core/native/elementwise_loop.h"
#include "core/native/native.h"
#include "core/native/nn_kernels_transformer.h"

namespace lockstep::native {

namespace {

// The targets as int64 values, after checking shapes and ranges against logits.
std::vector<int64_t> checked_targets(const Tensor& logits, const Tensor& target,
                                     int64_t ignore_index, const char* op) {
  LS_CHECK(logits.defined() && target.defined(), op, ": logits and target must be defined");
  LS_CHECK(logits.dim() == 2, op, ": logits must be 2-d (N, C), got ", logits.shape_str());
  LS_CHECK(logits.is_floating_point(), op, ": logits must be float32 or float64, got ",
           dtype_name(logits.dtype()));
  LS_CHECK(target.dtype() == kInt64, op, ": target must hold int64 class indices, got ",
           dtype_name(target.dtype()), "; convert with .to(ls::kInt64)");
  LS_CHECK(target.dim() == 1 && target.size(0) == logits.size(0), op, ": target ",
           target.shape_str(), " must have shape [N] for logits ", logits.shape_str());
  const int64_t c = logits.size(1);
  std::vector<int64_t> t = target.to_vector<int64_t>();
  for (size_t i = 0; i < t.size(); ++i) {
    LS_CHECK(t[i] == ignore_index || (t[i] >= 0 && t[i] < c), op, ": target ", t[i],
             " (at position ", i, ") is out of bounds for C = ", c,
             " classes; targets must be in [0, ", c, ") or equal ignore_index (", ignore_index,
             ")");
  }
  return t;
}

int64_t count_kept(const std::vector<int64_t>& t, int64_t ignore_index) {
  int64_t n = 0;
  for (int64_t v : t) n += v != ignore_index;
  return n;
}

void check_same(const Tensor& input, const Tensor& target, const char* op) {
  LS_CHECK(input.defined() && target.defined(), op, ": input and target must be defined");
  LS_CHECK(input.sizes() == target.sizes(), op, ": input ", input.shape_str(), " and target ",
           target.shape_str(), " must have the same shape");
  LS_CHECK(input.is_floating_point() && input.dtype() == target.dtype(), op, ": input (",
           dtype_name(input.dtype()), ") and target (", dtype_name(target.dtype()),
           ") must have the same floating dtype; convert with .to(...)");
}

}  // namespace

std::tuple<Tensor, Tensor> cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                                 int64_t ignore_index) {
  LS_DISPATCH_CUDA(logits, cross_entropy_forward(logits, target, ignore_index));
  const std::vector<int64_t> t = checked_targets(logits, target, ignore_index, "cross_entropy");
  const int64_t c = logits.size(1);
  Tensor log_probs = log_softmax(logits, 1);  // (N, C), contiguous
  Tensor loss = empty({}, logits.dtype());
  dispatch_floating(logits.dtype(), "cross_entropy", [&]<class T>() {
    const T* lp = log_probs.data_ptr<T>();
    double sum = 0;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i] != ignore_index) sum -= lp[static_cast<int64_t>(i) * c + t[i]];
    }
    const double count = static_cast<double>(count_kept(t, ignore_index));
    *loss.data_ptr<T>() = static_cast<T>(sum / count);  // NaN when count == 0
  });
  return {loss, log_probs};
}

Tensor cross_entropy_backward(const Tensor& grad, const Tensor& log_probs, const Tensor& target,
                              int64_t ignore_index) {
  LS_DISPATCH_CUDA(log_probs, cross_entropy_backward(grad, log_probs, target, ignore_index));
  LS_CHECK(grad.defined() && grad.numel() == 1,
           "cross_entropy_backward: grad must hold one value (the loss is a scalar)");
  const std::vector<int64_t> t =
      checked_targets(log_probs, target, ignore_index, "cross_entropy_backward");
  const int64_t n = log_probs.size(0), c = log_probs.size(1);
  const int64_t count = count_kept(t, ignore_index);
  const double scale = count > 0 ? grad.item<double>() / static_cast<double>(count) : 0.0;
  const Tensor lp = contiguous(log_probs);
  Tensor grad_logits = empty({n, c}, lp.dtype());  // (N, C)
  dispatch_floating(lp.dtype(), "cross_entropy_backward", [&]<class T>() {
    const T* lpp = lp.data_ptr<T>();
    T* gp = grad_logits.data_ptr<T>();
    const T s = static_cast<T>(scale);
    const int64_t grain = std::max<int64_t>(1, detail::kGrain / std::max<int64_t>(c, 1));
    parallel_for(0, n, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        T* row = gp + i * c;
        if (t[i] == ignore_index) {
          std::fill(row, row + c, T(0));
          continue;
        }
        const T* lrow = lpp + i * c;
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) row[j] = detail::exp_simd(lrow[j]) * s;  // softmax * s
        row[t[i]] -= s;                                                          // - onehot * s
      }
    });
  });
  return grad_logits;
}

std::tuple<Tensor, Tensor> cross_entropy_bf16_forward(const Tensor& logits, const Tensor& target,
                                                      int64_t ignore_index) {
  const std::vector<int64_t> t = checked_targets(logits, target, ignore_index, "cross_entropy");
  LS_CHECK(logits.dtype() == kBFloat16, "cross_entropy_bf16_forward: logits must be bfloat16, got ",
           dtype_name(logits.dtype()));
  const Tensor x = contiguous(logits);
  const int64_t n = x.size(0), c = x.size(1);
  Tensor shift = empty({n, 2}, kFloat32);  // (N, 2): each row's m and log_sum_exp
  std::vector<float> picked(static_cast<size_t>(n), 0.0f);  // lp[i, t_i]
  const BFloat16* xp = x.data_ptr<BFloat16>();
  float* sp = shift.data_ptr<float>();
  const int64_t grain = std::max<int64_t>(1, detail::kGrain / std::max<int64_t>(c, 1));
  parallel_for(0, n, grain, [&](int64_t lo, int64_t hi) {
    std::vector<float> row(static_cast<size_t>(c));  // the row widened: the cast's values
    for (int64_t i = lo; i < hi; ++i) {
      widen_bf16(xp + i * c, row.data(), c);
      const float m = detail::row_max(row.data(), c);
      const float log_s = detail::row_log_sum_exp(row.data(), c, m);
      sp[2 * i] = m;
      sp[2 * i + 1] = log_s;
      if (t[i] != ignore_index) picked[i] = (row[t[i]] - m) - log_s;
    }
  });
  double sum = 0;  // row order, as cross_entropy_forward
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != ignore_index) sum -= picked[i];
  }
  Tensor loss = empty({}, kFloat32);
  const double count = static_cast<double>(count_kept(t, ignore_index));
  *loss.data_ptr<float>() = static_cast<float>(sum / count);  // NaN when count == 0
  return {loss, shift};
}

Tensor cross_entropy_bf16_backward(const Tensor& grad, const Tensor& logits, const Tensor& shift,
                                   const Tensor& target, int64_t ignore_index) {
  LS_CHECK(grad.defined() && grad.numel() == 1,
           "cross_entropy_backward: grad must hold one value (the loss is a scalar)");
  const std::vector<int64_t> t =
      checked_targets(logits, target, ignore_index, "cross_entropy_backward");
  const int64_t n = logits.size(0), c = logits.size(1);
  LS_CHECK(logits.dtype() == kBFloat16 && shift.dtype() == kFloat32 && shift.dim() == 2 &&
               shift.size(0) == n && shift.size(1) == 2,
           "cross_entropy_bf16_backward: expected bf16 logits (N, C) and float32 row shifts "
           "(N, 2), got ", dtype_name(logits.dtype()), " ", logits.shape_str(), " and ",
           dtype_name(shift.dtype()), " ", shift.shape_str());
  const int64_t count = count_kept(t, ignore_index);
  const double scale = count > 0 ? grad.item<double>() / static_cast<double>(count) : 0.0;
  const Tensor x = contiguous(logits), sh = contiguous(shift);
  Tensor grad_logits = empty({n, c}, kBFloat16);  // (N, C), the logits' dtype
  const BFloat16* xp = x.data_ptr<BFloat16>();
  const float* sp = sh.data_ptr<float>();
  BFloat16* gp = grad_logits.data_ptr<BFloat16>();
  const float s = static_cast<float>(scale);
  const int64_t grain = std::max<int64_t>(1, detail::kGrain / std::max<int64_t>(c, 1));
  parallel_for(0, n, grain, [&](int64_t lo, int64_t hi) {
    std::vector<float> row(static_cast<size_t>(c));
    for (int64_t i = lo; i < hi; ++i) {
      if (t[i] == ignore_index) {
        std::fill(row.begin(), row.end(), 0.0f);
      } else {
        widen_bf16(xp + i * c, row.data(), c);
        const float m = sp[2 * i], log_s = sp[2 * i + 1];
        float* r = row.data();
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) r[j] = detail::exp_simd((r[j] - m) - log_s) * s;
        row[t[i]] -= s;
      }
      round_to_bf16(row.data(), gp + i * c, c);
    }
  });
  return grad_logits;
}

Tensor mse_loss_forward(const Tensor& input, const Tensor& target) {
  LS_DISPATCH_CUDA(input, mse_loss_forward(input, target));
  check_same(input, target, "mse_loss");
  const Tensor x = contiguous(input), y = contiguous(target);
  const int64_t n = x.numel();
  const int64_t blocks = (n + detail::kGrain - 1) / detail::kGrain;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);  // one sum per fixed block
  Tensor loss = empty({}, x.dtype());
  dispatch_floating(x.dtype(), "mse_loss", [&]<class T>() {
    const T* xp = x.data_ptr<T>();
    const T* yp = y.data_ptr<T>();
    parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        const int64_t end = std::min(n, (b + 1) * detail::kGrain);
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = b * detail::kGrain; i < end; ++i) {
          const double d = static_cast<double>(xp[i]) - yp[i];
          s += d * d;
        }
        partial[b] = s;
      }
    });
    double sum = 0;
    for (double s : partial) sum += s;
    *loss.data_ptr<T>() = static_cast<T>(sum / static_cast<double>(n));  // NaN when n == 0
  });
  return loss;
}

Tensor mse_loss_backward(const Tensor& grad, const Tensor& input, const Tensor& target) {
  LS_DISPATCH_CUDA(input, mse_loss_backward(grad, input, target));
  check_same(input, target, "mse_loss_backward");
  LS_CHECK(grad.defined() && grad.numel() == 1,
           "mse_loss_backward: grad must hold one value (the loss is a scalar)");
  const Tensor x = contiguous(input), y = contiguous(target);
  const int64_t n = x.numel();
  Tensor grad_input = empty(x.sizes(), x.dtype());
  const double scale = n > 0 ? 2.0 * grad.item<double>() / static_cast<double>(n) : 0.0;
  dispatch_floating(x.dtype(), "mse_loss_backward", [&]<class T>() {
    const T* xp = x.data_ptr<T>();
    const T* yp = y.data_ptr<T>();
    T* gp = grad_input.data_ptr<T>();
    const T s = static_cast<T>(scale);
    parallel_for(0, n, detail::kGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) gp[i] = (xp[i] - yp[i]) * s;
    });
  });
  return grad_input;
}

}  // namespace lockstep::native
