// core/native/dropout.cpp — inverted dropout: zero each element with probability p,
// scale the survivors by 1 / (1 - p).
//
// The mask is ls::bernoulli(shape, 1 - p) as bool (true = kept), drawn from the
// default generator, so manual_seed(s) fixes which elements drop and every rank
// seeded alike drops the same ones. Scaling at training time ("inverted" dropout)
// keeps E[output] = input, so evaluation is the identity. The mask is returned
// for backward, which is the same product: dL/dx = g * mask / (1 - p).
// p == 1 drops everything; the scale is then taken as 0 rather than 1 / 0, so
// output and gradient are zeros, not NaNs (as in PyTorch).
//
// Read before: core/rng.h, core/factory.h. Read next: core/native/loss.cpp.
#include <algorithm>

#include "core/factory.h"
#include "core/native/elementwise_loop.h"
#include "core/native/native.h"
#include "core/native/nn_kernels_transformer.h"

namespace lockstep::native {

namespace {

void check_p(double p, const char* op) {
  LS_CHECK(p >= 0.0 && p <= 1.0, op, ": dropout probability has to be between 0 and 1, but got ",
           p);
}

// out = x * mask * scale elementwise over contiguous tensors of the same numel.
Tensor apply_mask(const Tensor& input, const Tensor& mask, double p, const char* op) {
  LS_CHECK(mask.dtype() == kBool && mask.sizes() == input.sizes(), op, ": mask ", mask.shape_str(),
           " (", dtype_name(mask.dtype()), ") must be a bool tensor of shape ", input.shape_str());
  const Tensor x = contiguous(input);
  const Tensor keep = contiguous(mask);
  Tensor out = empty(x.sizes(), x.dtype());
  const double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    const T* xp = x.data_ptr<T>();
    const bool* kp = keep.data_ptr<bool>();
    T* yp = out.data_ptr<T>();
    const T s = static_cast<T>(scale);
    parallel_for(0, x.numel(), detail::kGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) yp[i] = kp[i] ? xp[i] * s : T(0);
    });
  });
  return out;
}

}  // namespace

std::tuple<Tensor, Tensor> dropout_forward(const Tensor& input, double p) {
  LS_CHECK(input.defined(), "dropout: input is an undefined tensor");
  check_p(p, "dropout");
  LS_CHECK(input.is_floating_point(), "dropout: expected a floating input, got ",
           dtype_name(input.dtype()));
  Tensor mask = bernoulli(input.sizes(), 1.0 - p, TensorOptions().dtype(kBool));
  return {apply_mask(input, mask, p, "dropout"), mask};
}

Tensor dropout_backward(const Tensor& grad_output, const Tensor& mask, double p) {
  LS_CHECK(grad_output.defined(), "dropout_backward: grad_output is undefined");
  check_p(p, "dropout_backward");
  return apply_mask(grad_output, mask, p, "dropout_backward");
}

}  // namespace lockstep::native
