// autograd/functions/linear_map.h — the gradient of a linear backward, differentiable
// to every order.
//
// § Note [Linear backward formulas]
// Many backward formulas are linear in the incoming gradient g with coefficients
// fixed by the forward: pooling (the argmax indices, the windows), indexing
// (narrow, select, index_select, gather), embedding (the indices). Such a
// formula is a linear map L applied to g, and its own derivative is the adjoint
// L^T, which is the forward op again with the same constants: the adjoint of
// max-pool's "scatter g to the argmax" is "gather at the argmax", the adjoint of
// narrow's "zeros with g written into [start, start + len)" is narrow itself.
// apply_linear_map(g, map) runs L natively and, under grad mode (a backward with
// create_graph, Note [Double backward] in autograd/double_backward.h), records a
// LinearMapBackward node whose formula is apply_linear_map with L and L^T
// swapped, so the gradient of a gradient of ... is always another application of
// L or L^T. Both directions are native kernels; a plain backward (no
// create_graph) never builds a LinearMap at all, so its path is unchanged.
// Tests: tests/autograd/test_double_backward_nn.cpp.
//
// Read before: autograd/functions/functions.h, autograd/double_backward.h.
// Read next: autograd/functions/pool.cpp, autograd/functions/indexing.cpp.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace lockstep::autograd {

struct LinearMap {
  std::string name;  // the backward node whose formula this is, e.g. "MaxPool2dBackward"
  std::function<Tensor(const Tensor&)> map;      // L: g -> the gradient (native kernels)
  std::function<Tensor(const Tensor&)> adjoint;  // L^T, the forward with L's constants
};

inline std::shared_ptr<const LinearMap> make_linear_map(std::string name,
                                                        std::function<Tensor(const Tensor&)> map,
                                                        std::function<Tensor(const Tensor&)> adjoint) {
  return std::make_shared<const LinearMap>(LinearMap{std::move(name), std::move(map), std::move(adjoint)});
}

// L(g), or L^T(g) when `transposed`, recorded as above when grad mode is on and g
// requires grad.
Tensor apply_linear_map(const Tensor& g, const std::shared_ptr<const LinearMap>& map,
                        bool transposed = false);

}  // namespace lockstep::autograd

