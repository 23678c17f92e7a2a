// tests/support/gradcheck.h — checks a backward formula against finite differences.
//
// gradcheck(fn, inputs) compares two Jacobians of y = fn(inputs), in float64:
//   numerical   column by column: perturb one input element by ±eps and take the
//               central difference (y(x + eps) - y(x - eps)) / (2 eps);
//   analytical  row by row: run backward from y with a one-hot grad_output
//               (retain_graph, so one forward serves every row) and read the
//               inputs' .grad.
// Every floating input is differentiated (gradcheck works on its own contiguous
// leaf copies, so the caller's tensors are untouched); integer inputs (indices)
// are passed through. The Jacobian has numel(y) * numel(x) entries per input and
// costs 2 * numel(x) forwards, so keep inputs small (tens of elements).
// An entry passes when |analytical - numerical| <= atol + rtol * |numerical|;
// the result says where the first mismatch is (input, element, output element,
// both values), and also fails when a gradient has the wrong shape or dtype.
//
// In doctest files (include <doctest/doctest.h> first) CHECK_GRADCHECK(fn,
// inputs[, eps, atol, rtol]) runs gradcheck and fails with its message;
// CHECK_GRADGRADCHECK does the same for gradgradcheck (second derivatives).
//
// To test an op on a non-contiguous input, make the view inside fn
// (fn = [](auto& x) { return x[0].t().reshape({6}); }): the view's backward is
// then checked too.
//
// § Note [Kink policy]
// Central differences are only meaningful where fn is differentiable in a
// 2*eps neighbourhood. relu and abs have a kink at 0; max/min/maximum/minimum
// have one wherever two candidates tie. gradcheck does not move inputs itself:
// tests draw inputs away from kinks with the helpers below —
//   away_from_zero(x, margin)   every |x| >= margin   (relu, abs, also log/sqrt/div)
//   distinct_values(sizes, gap) no two elements closer than gap (max, min, argmax ties)
// — and check the behaviour *at* a kink (relu'(0) = 0, ties splitting the
// gradient evenly) with exact hand-computed values instead.
//
// Read before: autograd/engine.h. Used by: tests/autograd/test_functions_*.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad.h"
#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace lockstep::testing {

struct GradcheckResult {
  bool ok = true;
  std::string message;  // empty when ok; otherwise the first problem found
  explicit operator bool() const { return ok; }
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

namespace detail {

inline std::string index_str(int64_t flat, const IntList& sizes) {
  if (sizes.empty()) return "[] (0-d)";
  IntList index(sizes.size());
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    index[d] = sizes[d] == 0 ? 0 : flat % sizes[d];
    flat = sizes[d] == 0 ? 0 : flat / sizes[d];
  }
  return shape_str(index);
}

inline GradcheckResult fail(std::string message) { return {false, std::move(message)}; }

// y's elements in row-major order, as double.
inline std::vector<double> values(const Tensor& y) { return y.to_vector<double>(); }

}  // namespace detail

inline GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                                 double eps = 1e-6, double atol = 1e-5, double rtol = 1e-3) {
  // Leaf copies: contiguous float64 tensors that require grad.
  std::vector<Tensor> xs;
  std::vector<size_t> diff;  // positions of the differentiated inputs
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor x = inputs[i].detach();
    if (x.is_floating_point()) {
      if (x.dtype() != kFloat64) {
        return detail::fail("gradcheck: input " + std::to_string(i) + " has dtype " +
                            dtype_name(x.dtype()) + "; gradcheck needs float64 inputs");
      }
      x = x.clone();
      x.requires_grad_(true);
      diff.push_back(i);
    }
    xs.push_back(x);
  }

  // Analytical Jacobians: J[i][k * n_i + j] = d y_k / d x_i[j].
  Tensor y = fn(xs);
  if (!y.is_floating_point()) return detail::fail("gradcheck: fn must return a floating tensor");
  const IntList y_sizes = y.sizes();
  const int64_t n_out = y.numel();
  std::vector<std::vector<double>> analytical(inputs.size());
  for (size_t i : diff) analytical[i].assign(static_cast<size_t>(n_out * xs[i].numel()), 0.0);
  if (y.requires_grad()) {
    for (int64_t k = 0; k < n_out; ++k) {
      for (size_t i : diff) xs[i].mutable_grad() = Tensor();
      std::vector<double> one_hot(static_cast<size_t>(n_out), 0.0);
      one_hot[static_cast<size_t>(k)] = 1.0;
      Tensor seed = tensor(one_hot, {}, TensorOptions().dtype(y.dtype())).reshape(y_sizes);
      y.backward(seed, /*retain_graph=*/true);
      for (size_t i : diff) {
        const Tensor& g = xs[i].grad();
        if (!g.defined()) continue;  // no path from x_i to y: a zero row
        if (g.sizes() != xs[i].sizes() || g.dtype() != xs[i].dtype()) {
          return detail::fail("gradcheck: the gradient of input " + std::to_string(i) +
                              " has shape " + g.shape_str() + " and dtype " +
                              dtype_name(g.dtype()) + " but the input has shape " +
                              xs[i].shape_str() + " and dtype " + dtype_name(xs[i].dtype()));
        }
        std::vector<double> row = g.to_vector<double>();
        std::copy(row.begin(), row.end(), analytical[i].begin() + k * xs[i].numel());
      }
    }
  }

  // Numerical Jacobians, compared as they are computed.
  NoGradGuard no_grad;
  for (size_t i : diff) {
    double* data = xs[i].data_ptr<double>();
    const int64_t n_in = xs[i].numel();
    for (int64_t j = 0; j < n_in; ++j) {
      const double original = data[j];
      data[j] = original + eps;
      std::vector<double> plus = detail::values(fn(xs));
      data[j] = original - eps;
      std::vector<double> minus = detail::values(fn(xs));
      data[j] = original;
      for (int64_t k = 0; k < n_out; ++k) {
        double numerical = (plus[k] - minus[k]) / (2.0 * eps);
        double analytic = analytical[i][static_cast<size_t>(k * n_in + j)];
        bool close = std::abs(analytic - numerical) <= atol + rtol * std::abs(numerical);
        if (!close || std::isnan(analytic) != std::isnan(numerical)) {
          std::ostringstream os;
          os << "gradcheck: Jacobian mismatch for input " << i << " (shape "
             << xs[i].shape_str() << ") at element " << detail::index_str(j, xs[i].sizes())
             << ", output element " << detail::index_str(k, y_sizes) << ": numerical "
             << numerical << " vs analytical " << analytic << " (atol " << atol << ", rtol "
             << rtol << ")";
          return detail::fail(os.str());
        }
      }
    }
  }
  return {};
}

// gradgradcheck(fn, inputs): checks second derivatives (Note [Double backward] in
// autograd/double_backward.h), as PyTorch's gradgradcheck does. With a random
// grad_output v of y's shape, the first-order function
//   (inputs..., v) -> autograd::grad(y, floating inputs, v, create_graph=true),
// flattened and concatenated, goes through gradcheck: its analytical Jacobian is a
// backward through the recorded first backward, its numerical one differences of
// first-order gradients. An input y does not depend on contributes zeros.
// gradcheck runs fn under NoGradGuard for its numerical Jacobian; a fn that takes
// gradients itself needs its forward recorded there too: AutoGradMode(true).
inline GradcheckResult gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                                     double eps = 1e-6, double atol = 1e-5, double rtol = 1e-3) {
  std::vector<Tensor> with_v = inputs;
  {
    NoGradGuard no_grad;
    std::vector<Tensor> plain;
    for (const Tensor& x : inputs) plain.push_back(x.detach());
    with_v.push_back(randn(fn(plain).sizes(), TensorOptions().dtype(kFloat64)));
  }
  GradcheckFn first_order = [&fn](const std::vector<Tensor>& xs) {
    AutoGradMode grad_on(true);
    std::vector<Tensor> ins(xs.begin(), xs.end() - 1);
    Tensor y = fn(ins);
    std::vector<Tensor> wrt;
    for (const Tensor& x : ins) {
      if (x.requires_grad()) wrt.push_back(x);
    }
    std::vector<Tensor> grads = autograd::grad({y}, wrt, {xs.back()}, std::nullopt,
                                               /*create_graph=*/true, /*allow_unused=*/true);
    std::vector<Tensor> flat;
    for (size_t i = 0; i < grads.size(); ++i) {
      flat.push_back(grads[i].defined() ? grads[i].reshape({-1})
                                        : zeros({wrt[i].numel()}, TensorOptions().dtype(kFloat64)));
    }
    return cat(flat, 0);
  };
  return gradcheck(first_order, with_v, eps, atol, rtol);
}

// ---- inputs for gradcheck (see Note [Kink policy]) ----

// Standard normal float64 values.
inline Tensor randn64(const IntList& sizes) { return randn(sizes, TensorOptions().dtype(kFloat64)); }

// x moved away from 0: every element gets margin added to its magnitude, so |x| >= margin.
inline Tensor away_from_zero(const Tensor& x, double margin = 0.1) {
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v) e = e >= 0 ? e + margin : e - margin;
  return tensor(v, {}, TensorOptions().dtype(kFloat64)).reshape(x.sizes());
}

// A random arrangement of gap * (0, 1, ..., n-1) centred on 0: no two elements tie.
inline Tensor distinct_values(const IntList& sizes, double gap = 0.1) {
  std::vector<int64_t> order = randperm(numel_of(sizes)).to_vector<int64_t>();
  const double centre = static_cast<double>(order.size() - 1) / 2.0;
  std::vector<double> v;
  v.reserve(order.size());
  for (int64_t o : order) v.push_back(gap * (static_cast<double>(o) - centre));
  return tensor(v, {}, TensorOptions().dtype(kFloat64)).reshape(sizes);
}

}  // namespace lockstep::testing

// In doctest files: CHECK_GRADCHECK(fn, inputs[, eps, atol, rtol]) fails the test
// with gradcheck's message.
#ifdef DOCTEST_LIBRARY_INCLUDED
#define LOCKSTEP_CHECK_GRADCHECK_RESULT_(check, ...)                     \
  do {                                                                    \
    ::lockstep::testing::GradcheckResult gradcheck_result_ =             \
        ::lockstep::testing::check(__VA_ARGS__);                          \
    CHECK_MESSAGE(gradcheck_result_.ok, gradcheck_result_.message);       \
  } while (0)
#define CHECK_GRADCHECK(...) LOCKSTEP_CHECK_GRADCHECK_RESULT_(gradcheck, __VA_ARGS__)
#define CHECK_GRADGRADCHECK(...) LOCKSTEP_CHECK_GRADCHECK_RESULT_(gradgradcheck, __VA_ARGS__)
#endif
