// autograd/functions/linear_map.cpp — LinearMapBackward (Note [Linear backward formulas]).
// Read before: autograd/functions/linear_map.h.
#include "autograd/functions/linear_map.h"

#include "autograd/functions/functions.h"

namespace lockstep::autograd {
namespace {

// The node of y = L(g): its formula is dg = L^T(dy), itself recorded under grad mode.
struct LinearMapBackward final : DoubleBackwardNode {
  std::shared_ptr<const LinearMap> map;
  bool transposed = false;  // y = L^T(g) instead
  std::string name() const override {
    return (transposed ? "LinearMapAdjointBackward(" : "LinearMapBackward(") + map->name + ")";
  }
  variable_list apply(variable_list&& grads) override {
    return {apply_linear_map(grads[0], map, !transposed)};
  }
};

}  // namespace

Tensor apply_linear_map(const Tensor& g, const std::shared_ptr<const LinearMap>& map,
                        bool transposed) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = transposed ? map->adjoint(g) : map->map(g);
    // A fresh handle if a map returned g itself: record() must not rewrite g's history.
    if (y.impl() == g.impl()) y = y.detach();
  }
  if (compute_requires_grad({g})) {
    auto node = std::make_shared<LinearMapBackward>();
    node->map = map;
    node->transposed = transposed;
    record(node, {g}, {y});
  }
  return y;
}

}  // namespace lockstep::autograd
