// autograd/functions/reduce.cpp — sum, mean, max, min.
//
// A reduction maps many inputs to one output, so its backward hands each input
// the gradient of the output it fed:
//   SumBackward     every input fed its sum with weight 1: expand g back to the
//                   input's shape (after re-inserting the reduced dims when
//                   keepdim was false).
//   MeanBackward    the same, divided by the number of elements averaged.
//   MaxBackward /   over all elements: g is split evenly among the elements equal
//   MinBackward     to the max (PyTorch 1.13's evenly_distribute_backward), so
//                   with k ties each gets g / k.
//   MaxDimBackward/ along a dim: g goes to the element the returned index names
//   MinDimBackward  (the first max on ties, as native::max_dim picks it); the
//                   indices output is an int64 tensor and is not differentiable.
//
// All four support double backward (grad_ops.h; the max/min masks are constants).
//
// Read before: autograd/functions/functions.h. Read next: autograd/functions/softmax.cpp.
#include <algorithm>

#include "autograd/functions/functions.h"
#include "core/factory.h"
#include "core/profiler.h"
#include "core/shape.h"

namespace lockstep::autograd {
namespace {

using native::BinaryOp;

// The reduced dims, wrapped and sorted; empty `dims` means every dim (as in native::sum).
IntList reduced_dims(const IntList& dims, int64_t ndim, const char* op) {
  IntList out;
  if (ndim == 0) return out;  // a 0-d tensor has no dim to re-insert
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// g has the reduced shape; give it back the input's shape. With keepdim=false
// the reduced dims were dropped, so they are re-inserted as size 1 first
// (ascending, so each index refers to the final layout).
Tensor expand_reduced(const Tensor& g, const IntList& self_sizes, const IntList& dims,
                      bool keepdim) {
  Tensor kept = g;
  if (!keepdim) {
    for (int64_t d : dims) kept = grad_ops::unsqueeze(kept, d);
  }
  return grad_ops::expand(kept, self_sizes);
}

struct SumBackward final : DoubleBackwardNode {
  IntList self_sizes, dims;  // dims: wrapped, sorted
  bool keepdim = false;
  std::string name() const override { return "SumBackward"; }
  variable_list apply(variable_list&& grads) override {
    return {expand_reduced(grads[0], self_sizes, dims, keepdim)};
  }
};

struct MeanBackward final : DoubleBackwardNode {
  IntList self_sizes, dims;
  bool keepdim = false;
  double count = 1.0;  // elements averaged into each output
  std::string name() const override { return "MeanBackward"; }
  variable_list apply(variable_list&& grads) override {
    Tensor scaled = grad_ops::div(grads[0], count);
    return {expand_reduced(scaled, self_sizes, dims, keepdim)};
  }
};

// max() / min() over every element: see the file comment for ties.
struct MaxMinAllBackward final : DoubleBackwardNode {
  SavedVariable self, result;
  const char* name_ = "MaxBackward";
  std::string name() const override { return name_; }
  variable_list apply(variable_list&& grads) override {
    Tensor x = self.unpack(name()), y = result.unpack(name());
    Tensor is_extreme = mask_to(native::compare(native::CompareOp::Eq, x, y), grads[0].dtype());
    Tensor count = native::sum(is_extreme, {}, false);                  // 0-d
    Tensor share = grad_ops::div(grads[0], count);                      // 0-d
    return {grad_ops::mul(is_extreme, share)};  // the 0/1 mask is a constant
  }
  void release_variables() override {
    self.reset();
    result.reset();
  }
};

// max(dim) / min(dim): g lands where `indices` points; every other element gets 0.
struct MaxMinDimBackward final : DoubleBackwardNode {
  IntList self_sizes;
  int64_t dim = 0;  // wrapped
  bool keepdim = false;
  SavedVariable indices;
  const char* name_ = "MaxDimBackward";
  std::string name() const override { return name_; }
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];
    if (self_sizes.empty()) return {g};  // a 0-d input is its own max
    Tensor idx = indices.unpack(name());
    Tensor g_kept = keepdim ? g : grad_ops::unsqueeze(g, dim);  // size 1 at dim
    Tensor idx_kept = keepdim ? idx : native::unsqueeze(idx, dim);
    // positions: 0, 1, ..., size-1 along `dim`, size 1 elsewhere, so comparing with
    // idx_kept broadcasts to the input's shape and is true exactly at the chosen elements.
    IntList position_shape(self_sizes.size(), 1);
    position_shape[dim] = self_sizes[dim];
    Tensor positions = native::view(
        arange(0, self_sizes[dim], 1, TensorOptions().dtype(kInt64).device(g.device())), position_shape);
    Tensor chosen = native::compare(native::CompareOp::Eq, idx_kept, positions);
    return {grad_ops::where(chosen, g_kept, zero_scalar(g.dtype(), g.device()))};
  }
  void release_variables() override { indices.reset(); }
};

double count_reduced(const IntList& sizes, const IntList& dims) {
  double n = 1.0;
  for (int64_t d : dims) n *= static_cast<double>(sizes[d]);
  return n;
}

Tensor max_min_all(const Tensor& x, bool is_max) {
  profiler::Scope prof(is_max ? "max" : "min");
  Tensor y = is_max ? native::max_all(x) : native::min_all(x);
  if (compute_requires_grad({x})) {
    auto node = std::make_shared<MaxMinAllBackward>();
    node->self = SavedVariable(x);
    node->result = SavedVariable(y);
    node->name_ = is_max ? "MaxBackward" : "MinBackward";
    record(node, {x}, {y});
  }
  return y;
}

std::tuple<Tensor, Tensor> max_min_dim(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  profiler::Scope prof(is_max ? "max" : "min");
  auto [values, indices] = is_max ? native::max_dim(x, dim, keepdim) : native::min_dim(x, dim, keepdim);
  if (compute_requires_grad({x})) {
    auto node = std::make_shared<MaxMinDimBackward>();
    node->self_sizes = x.sizes();
    node->dim = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), is_max ? "max" : "min");
    node->keepdim = keepdim;
    node->indices = SavedVariable(indices);
    node->name_ = is_max ? "MaxDimBackward" : "MinDimBackward";
    record(node, {x}, {values});  // indices are not differentiable
  }
  return {values, indices};
}

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the ops that record these nodes

Tensor Tensor::sum() const { return sum({}, false); }

Tensor Tensor::sum(const IntList& dims, bool keepdim) const {
  profiler::Scope prof("sum");
  Tensor y = native::sum(*this, dims, keepdim);
  if (compute_requires_grad({*this})) {
    auto node = std::make_shared<SumBackward>();
    node->self_sizes = sizes();
    node->dims = reduced_dims(dims, dim(), "sum");
    node->keepdim = keepdim;
    record(node, {*this}, {y});
  }
  return y;
}

Tensor Tensor::mean() const { return mean({}, false); }

Tensor Tensor::mean(const IntList& dims, bool keepdim) const {
  profiler::Scope prof("mean");
  Tensor y = native::mean(*this, dims, keepdim);
  if (compute_requires_grad({*this})) {
    auto node = std::make_shared<MeanBackward>();
    node->self_sizes = sizes();
    node->dims = reduced_dims(dims, dim(), "mean");
    node->keepdim = keepdim;
    node->count = count_reduced(sizes(), node->dims);
    record(node, {*this}, {y});
  }
  return y;
}

Tensor Tensor::max() const { return max_min_all(*this, /*is_max=*/true); }
Tensor Tensor::min() const { return max_min_all(*this, /*is_max=*/false); }

std::tuple<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const {
  return max_min_dim(*this, dim, keepdim, /*is_max=*/true);
}

std::tuple<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const {
  return max_min_dim(*this, dim, keepdim, /*is_max=*/false);
}

}  // namespace lockstep
