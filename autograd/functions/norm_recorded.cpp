// autograd/functions/norm_recorded.cpp — batch_norm's and layer_norm's recorded
// backward formulas.
// Read before: autograd/functions/norm_recorded.h.
#include "autograd/functions/norm_recorded.h"

#include "autograd/functions/functions.h"
#include "core/native/fused_relu.h"
#include "core/native/nn_kernels.h"

namespace lockstep::autograd {
namespace {

// xhat and invstd (keepdim over `dims`).
struct Normalized {
  Tensor xhat, invstd;
};

// The statistics of x over `dims`, recomputed with history.
Normalized normalize(const Tensor& x, const IntList& dims, double eps) {
  const Tensor centered = x - x.mean(dims, /*keepdim=*/true);
  const Tensor invstd = ((centered * centered).mean(dims, /*keepdim=*/true) + eps).rsqrt();
  return {centered * invstd, invstd};
}

// dx with statistics of the batch over `dims` (the header's first formula).
Tensor input_grad(const Tensor& gw, const Normalized& n, const IntList& dims) {
  return n.invstd * (gw - gw.mean(dims, true) - n.xhat * (gw * n.xhat).mean(dims, true));
}

// dims [from, to) as a list.
IntList dim_range(int64_t from, int64_t to) {
  IntList dims;
  for (int64_t d = from; d < to; ++d) dims.push_back(d);
  return dims;
}

// t summed over `dims` (none: t itself).
Tensor sum_over(const Tensor& t, const IntList& dims) { return dims.empty() ? t : t.sum(dims); }

}  // namespace

variable_list batch_norm_backward_recorded(const Tensor& grad, const Tensor& input, const Tensor& weight,
                                           const Tensor& mean, const Tensor& invstd, bool training,
                                           double eps, NormGrads need) {
  const ScalarType dt = norm_compute_dtype(input.dtype());
  const Tensor x = input.dtype() == dt ? input : input.to(dt);
  const Tensor g = grad.dtype() == dt ? grad : grad.to(dt);
  IntList dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  IntList per_channel(static_cast<size_t>(x.dim()), 1);  // (1, C, 1, ...)
  per_channel[1] = x.size(1);
  Normalized n;
  if (training) {
    n = normalize(x, dims, eps);
  } else {  // the running statistics: constants
    const Tensor m = native::reshape(native::to_dtype(mean, x.dtype()), per_channel);
    const Tensor s = native::reshape(native::to_dtype(invstd, x.dtype()), per_channel);
    n = {(x - m) * s, s};
  }
  const Tensor gw = weight.defined() ? g * weight.reshape(per_channel) : g;
  Tensor dx, dw, db;
  if (need.input) dx = training ? input_grad(gw, n, dims) : gw * n.invstd;
  if (dx.defined() && dx.dtype() != input.dtype()) dx = dx.to(input.dtype());
  if (need.weight && weight.defined()) dw = (g * n.xhat).sum(dims);
  if (need.bias) db = g.sum(dims);
  return {dx, dw, db};
}

variable_list layer_norm_backward_recorded(const Tensor& g, const Tensor& x,
                                           const IntList& normalized_shape, const Tensor& weight,
                                           double eps, NormGrads need) {
  const int64_t lead = x.dim() - static_cast<int64_t>(normalized_shape.size());
  const IntList dims = dim_range(lead, x.dim()), lead_dims = dim_range(0, lead);
  const Normalized n = normalize(x, dims, eps);
  const Tensor gw = weight.defined() ? g * weight : g;
  Tensor dx, dw, db;
  if (need.input) dx = input_grad(gw, n, dims);
  if (need.weight && weight.defined()) dw = sum_over(g * n.xhat, lead_dims);
  if (need.bias) db = sum_over(g, lead_dims);
  return {dx, dw, db};
}

Tensor relu_mask(const Tensor& output) {
  return native::compare_scalar(native::CompareOp::Gt, output, 0.0);
}

Tensor relu_mask_from_bits(const Tensor& x, const Tensor& weight, const Tensor& mean,
                           const Tensor& invstd, const Tensor& bits, bool training) {
  const Tensor ones = native::empty(x.sizes(), x.dtype(), x.device());
  native::fill_(ones, 1.0);
  const Tensor masked = std::get<3>(native::batch_norm_add_relu_backward_bits(
      ones, x, weight, mean, invstd, bits, training, false, false, false));
  return relu_mask(masked);
}

}  // namespace lockstep::autograd
