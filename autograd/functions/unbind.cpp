// autograd/functions/unbind.cpp — unbind and its one backward node for all slices.
// Read before: autograd/functions/unbind.h.
#include "autograd/functions/unbind.h"

#include "autograd/functions/functions.h"
#include "core/profiler.h"
#include "core/shape.h"

namespace lockstep::autograd {
namespace {

// Slice i's gradient goes to x's slice i; slices that got none stay zero.
struct UnbindBackward final : DoubleBackwardNode {
  InputMeta self;
  int64_t dim = 0;  // wrapped
  std::string name() const override { return "UnbindBackward"; }
  variable_list apply(variable_list&& grads) override {
    if (grad_ops::recording()) return {recorded_formula(grads)};
    Tensor dx;
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      if (!dx.defined()) dx = native::zeros(self.sizes, grads[i].dtype(), grads[i].device());
      native::copy_(native::select(dx, dim, static_cast<int64_t>(i)), grads[i]);
    }
    if (!dx.defined()) return {Tensor()};
    return {native::to_dtype(dx, self.dtype)};
  }
  // With create_graph: the slices' gradients stacked (a recorded stack), zeros for
  // the slices that got none.
  Tensor recorded_formula(const variable_list& grads) const {
    const Tensor* any = nullptr;
    for (const Tensor& g : grads) any = g.defined() ? &g : any;
    if (any == nullptr) return Tensor();
    IntList slice_sizes = self.sizes;
    slice_sizes.erase(slice_sizes.begin() + dim);
    std::vector<Tensor> parts;
    for (const Tensor& g : grads) {
      parts.push_back(g.defined() ? g : native::zeros(slice_sizes, any->dtype(), any->device()));
    }
    return grad_ops::to_dtype(stack(parts, dim), self.dtype);
  }
};

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

std::vector<Tensor> unbind(const Tensor& x, int64_t dim) {
  profiler::Scope prof("unbind");
  LS_CHECK(x.defined() && x.dim() >= 1, "unbind: expected a tensor with at least one dim but got ",
           x.defined() ? x.shape_str() : "an undefined tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "unbind");
  std::vector<Tensor> slices;
  slices.reserve(static_cast<size_t>(x.size(d)));
  for (int64_t i = 0; i < x.size(d); ++i) slices.push_back(native::select(x, d, i));
  if (autograd::compute_requires_grad({x}) && !slices.empty()) {
    auto node = std::make_shared<autograd::UnbindBackward>();
    node->self = autograd::InputMeta(x);
    node->dim = d;
    autograd::record(node, {x}, slices);
  }
  return slices;
}

}  // namespace lockstep
