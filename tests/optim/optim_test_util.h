// tests/optim/optim_test_util.h — small helpers shared by the optim tests:
// parameters from plain numbers, a deterministic gradient sequence, and reading
// values back as doubles. The reference trajectories in the tests use the same
// gradient formula with plain doubles (checked once against PyTorch 1.13).
#pragma once

#include <cmath>
#include <vector>

#include "core/factory.h"
#include "core/tensor.h"

namespace optim_test {

namespace ls = lockstep;

// The starting values every trajectory test uses.
inline const std::vector<double> kP0 = {0.5, -1.0, 2.0};

// A leaf that requires grad, holding `values`.
inline ls::Tensor make_param(const std::vector<double>& values,
                             ls::ScalarType dtype = ls::kFloat64) {
  return ls::tensor(values, {static_cast<int64_t>(values.size())},
                    ls::TensorOptions().dtype(dtype).requires_grad(true));
}

// The gradient of element i at step t (t = 1, 2, ...): varied signs and sizes.
inline double grad_value(int t, size_t i) {
  return std::sin(0.9 * t + 1.7 * static_cast<double>(i)) + 0.1 * static_cast<double>(i);
}

// Sets p.grad() to the step-t gradients, in p's dtype and shape.
inline void set_step_grad(const ls::Tensor& p, int t) {
  std::vector<double> g(static_cast<size_t>(p.numel()));
  for (size_t i = 0; i < g.size(); ++i) g[i] = grad_value(t, i);
  p.set_grad(ls::tensor(g, p.sizes(), ls::TensorOptions().dtype(p.dtype())));
}

inline std::vector<double> values(const ls::Tensor& t) { return t.to_vector<double>(); }

}  // namespace optim_test
