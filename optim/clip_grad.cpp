// optim/clip_grad.cpp — clip_grad_norm_.
// Read before: optim/clip_grad.h.
#include "optim/clip_grad.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/grad_mode.h"
#include "core/parallel.h"
#include "optim/optimizer.h"
#if LOCKSTEP_WITH_CUDA
#include "core/cuda/cuda_native_nn.h"
#endif

namespace lockstep::optim {

namespace {

// sum |g|^p (or max |g| when p is infinite) over one contiguous gradient, in double.
// Blocks of kOptimGrain elements are reduced independently (in parallel) and
// combined in block order, so the result is the same for any thread count.
template <class T>
double norm_part(const T* g, int64_t n, double p) {
  const bool inf = std::isinf(p);
  const int64_t block = detail::kOptimGrain;
  std::vector<double> partial(static_cast<size_t>((n + block - 1) / block), 0.0);
  parallel_for(0, static_cast<int64_t>(partial.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const int64_t end = std::min(n, (b + 1) * block);
      double acc = 0.0;
      for (int64_t i = b * block; i < end; ++i) {
        const double a = std::abs(static_cast<double>(g[i]));
        if (inf) {
          acc = std::max(acc, a);
        } else if (p == 2.0) {
          acc += a * a;
        } else {
          acc += std::pow(a, p);
        }
      }
      partial[static_cast<size_t>(b)] = acc;
    }
  });
  double total = 0.0;
  for (double v : partial) total = inf ? std::max(total, v) : total + v;
  return total;
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  LS_CHECK(norm_type > 0.0, "clip_grad_norm_: norm_type must be positive (or infinity), got ",
           norm_type);
  LS_CHECK(max_norm >= 0.0, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  const bool inf = std::isinf(norm_type);

  // 1. The total norm over every defined gradient.
  double acc = 0.0;  // sum |g|^p, or max |g|
  for (const Tensor& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    LS_CHECK(g.is_floating_point(), "clip_grad_norm_: a gradient of shape ", g.shape_str(),
             " has dtype ", g.dtype(), "; expected floating point");
#if LOCKSTEP_WITH_CUDA
    // A gradient on a GPU is reduced there (core/cuda/optim_kernels.cu); only its
    // partial sums come back to the host.
    if (g.device().is_cuda() && (g.dtype() == kFloat32 || g.dtype() == kFloat64)) {
      const double part = cuda_native::grad_norm_part(g, norm_type);
      acc = inf ? std::max(acc, part) : acc + part;
      continue;
    }
#endif
    // CPU gradients are contiguous in practice; anything else is copied to a
    // contiguous CPU float64 tensor first.
    Tensor c = (g.device().is_cpu() && (g.dtype() == kFloat32 || g.dtype() == kFloat64))
                   ? g.contiguous()
                   : g.to(kFloat64).to(Device::cpu()).contiguous();
    const double part = dispatch_floating(c.dtype(), "clip_grad_norm_", [&]<class T>() {
      return norm_part<T>(c.data_ptr<T>(), c.numel(), norm_type);
    });
    acc = inf ? std::max(acc, part) : acc + part;
  }
  const double total = inf ? acc : std::pow(acc, 1.0 / norm_type);

  // 2. Scale in place when the total exceeds max_norm (PyTorch's coefficient).
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0) {
    for (const Tensor& p : params) {
      const Tensor& g = p.grad();
      if (g.defined()) Tensor(g).mul_(coef);
    }
  }
  return total;
}

}  // namespace lockstep::optim
