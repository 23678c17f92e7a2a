// optim/clip_grad.cpp — clip_grad_norm_.
// Read before: optim/clip_grad.h.
#include "optim/clip_grad.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/grad_mode.h"
#include "core/native/optim_step.h"

namespace lockstep::optim {

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
    // Reduced on the gradient's device (core/native/optim_step.h; on a GPU only the
    // total comes back to the host). Other dtypes go through a float64 CPU copy.
    const bool native_dtype = g.dtype() == kFloat32 || g.dtype() == kFloat64;
    const Tensor c = native_dtype && (g.device().is_cpu() || g.device().is_cuda())
                         ? g
                         : g.to(kFloat64).to(Device::cpu());
    const double part = native::grad_norm_part(c, norm_type);
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
