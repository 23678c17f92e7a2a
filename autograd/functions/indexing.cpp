// autograd/functions/indexing.cpp — taking parts of a tensor and joining tensors.
//
// Taking a part (narrow, select, index_select) copies some input elements to
// the output, so the backward sends g back to where each element came from and
// zeros everywhere else; joining (cat, stack) is the other way round, so each
// input's gradient is its part of g:
//   NarrowBackward       narrow(dim, start, len)  zeros, with g written into [start, start+len)
//   SelectBackward       select(dim, i)           zeros, with g written into slice i
//   IndexSelectBackward  index_select(dim, idx)   zeros, with g added into the slices idx
//                                                 (a repeated index receives the sum)
//   CatBackward          cat(ts, dim)             input i gets g narrowed to its range
//   StackBackward        stack(ts, dim)           input i gets g.select(dim, i)
// All five are linear in g. With create_graph the first three run as linear maps
// whose adjoints are the forward ops (Note [Linear backward formulas]), and cat
// and stack take their parts with the recording narrow and select.
//
// Read before: autograd/functions/functions.h, autograd/functions/shape.cpp.
#include "autograd/functions/functions.h"
#include "autograd/functions/linear_map.h"
#include "core/profiler.h"
#include "core/shape.h"

namespace lockstep::autograd {
namespace {

// The three "zeros with g put back where it came from" formulas.
Tensor narrow_backward(const Tensor& g, const InputMeta& self, int64_t dim, int64_t start) {
  Tensor dx = native::zeros(self.sizes, g.dtype(), g.device());
  native::copy_(native::narrow(dx, dim, start, g.size(dim)), g);
  return native::to_dtype(dx, self.dtype);
}
Tensor select_backward(const Tensor& g, const InputMeta& self, int64_t dim, int64_t index) {
  Tensor dx = native::zeros(self.sizes, g.dtype(), g.device());
  native::copy_(native::select(dx, dim, index), g);
  return native::to_dtype(dx, self.dtype);
}
Tensor index_select_backward(const Tensor& g, const InputMeta& self, int64_t dim, const Tensor& index) {
  Tensor dx = native::zeros(self.sizes, g.dtype(), g.device());
  native::index_add_(dx, dim, index, g);
  return native::to_dtype(dx, self.dtype);
}

struct NarrowBackward final : DoubleBackwardNode {
  InputMeta self;
  int64_t dim = 0, start = 0;  // wrapped, non-negative
  std::string name() const override { return "NarrowBackward"; }
  variable_list apply(variable_list&& grads) override {
    if (!grad_ops::recording()) return {narrow_backward(grads[0], self, dim, start)};
    return {apply_linear_map(grads[0], make_linear_map(
        name(), [self = self, d = dim, at = start](const Tensor& g) { return narrow_backward(g, self, d, at); },
        [d = dim, at = start, len = grads[0].size(dim)](const Tensor& x) { return native::narrow(x, d, at, len); }))};
  }
};

struct SelectBackward final : DoubleBackwardNode {
  InputMeta self;
  int64_t dim = 0, index = 0;  // wrapped, non-negative
  std::string name() const override { return "SelectBackward"; }
  variable_list apply(variable_list&& grads) override {
    if (!grad_ops::recording()) return {select_backward(grads[0], self, dim, index)};
    return {apply_linear_map(grads[0], make_linear_map(
        name(), [self = self, d = dim, i = index](const Tensor& g) { return select_backward(g, self, d, i); },
        [d = dim, i = index](const Tensor& x) { return native::select(x, d, i); }))};
  }
};

struct IndexSelectBackward final : DoubleBackwardNode {
  InputMeta self;
  int64_t dim = 0;
  SavedVariable index;
  std::string name() const override { return "IndexSelectBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor idx = index.unpack(name());
    if (!grad_ops::recording()) return {index_select_backward(grads[0], self, dim, idx)};
    return {apply_linear_map(grads[0], make_linear_map(
        name(), [self = self, d = dim, idx](const Tensor& g) { return index_select_backward(g, self, d, idx); },
        [d = dim, idx](const Tensor& x) { return native::index_select(x, d, idx); }))};
  }
  void release_variables() override { index.reset(); }
};

struct CatBackward final : DoubleBackwardNode {
  std::vector<InputMeta> inputs;
  int64_t dim = 0;  // wrapped
  std::string name() const override { return "CatBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];
    variable_list dxs(inputs.size());
    int64_t at = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const int64_t len = inputs[i].sizes[dim];
      if (should_compute_output(i) && grad_ops::recording()) {
        dxs[i] = grad_ops::to_dtype(g.narrow(dim, at, len), inputs[i].dtype);
      } else if (should_compute_output(i)) {
        dxs[i] = native::to_dtype(native::narrow(g, dim, at, len), inputs[i].dtype);
      }
      at += len;
    }
    return dxs;
  }
};

struct StackBackward final : DoubleBackwardNode {
  std::vector<ScalarType> dtypes;
  int64_t dim = 0;  // wrapped, in the output's dims
  std::string name() const override { return "StackBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];
    variable_list dxs(dtypes.size());
    for (size_t i = 0; i < dtypes.size(); ++i) {
      const auto k = static_cast<int64_t>(i);
      if (should_compute_output(i) && grad_ops::recording()) {
        dxs[i] = grad_ops::to_dtype(g.select(dim, k), dtypes[i]);
      } else if (should_compute_output(i)) {
        dxs[i] = native::to_dtype(native::select(g, dim, k), dtypes[i]);
      }
    }
    return dxs;
  }
};

// A possibly negative position along a dim of `size`, as native::narrow/select read it.
int64_t wrap_index(int64_t i, int64_t size) { return i < 0 ? i + size : i; }

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the ops that record these nodes

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  profiler::Scope prof("narrow");
  Tensor y = native::narrow(*this, dim, start, length);
  if (compute_requires_grad({*this})) {
    auto node = std::make_shared<NarrowBackward>();
    node->self = InputMeta(*this);
    node->dim = wrap_dim(dim, this->dim(), "narrow");
    node->start = wrap_index(start, size(node->dim));
    record(node, {*this}, {y});
  }
  return y;
}

Tensor Tensor::select(int64_t dim, int64_t index) const {
  profiler::Scope prof("select");
  Tensor y = native::select(*this, dim, index);
  if (compute_requires_grad({*this})) {
    auto node = std::make_shared<SelectBackward>();
    node->self = InputMeta(*this);
    node->dim = wrap_dim(dim, this->dim(), "select");
    node->index = wrap_index(index, size(node->dim));
    record(node, {*this}, {y});
  }
  return y;
}

Tensor Tensor::index_select(int64_t dim, const Tensor& index) const {
  profiler::Scope prof("index_select");
  Tensor y = native::index_select(*this, dim, index);
  if (compute_requires_grad({*this})) {
    auto node = std::make_shared<IndexSelectBackward>();
    node->self = InputMeta(*this);
    node->dim = wrap_dim(dim, this->dim(), "index_select");
    node->index = SavedVariable(index);
    record(node, {*this}, {y});
  }
  return y;
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  profiler::Scope prof("cat");
  Tensor y = native::cat(tensors, dim);
  if (compute_requires_grad(tensors)) {
    auto node = std::make_shared<CatBackward>();
    node->dim = wrap_dim(dim, tensors[0].dim(), "cat");
    for (const Tensor& t : tensors) node->inputs.emplace_back(t);
    record(node, tensors, {y});
  }
  return y;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  profiler::Scope prof("stack");
  LS_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> slices;
  slices.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    LS_CHECK(tensors[i].sizes() == tensors[0].sizes(), "stack: every tensor must have the same "
             "shape, but tensor 0 has shape ", tensors[0].shape_str(), " and tensor ", i,
             " has shape ", tensors[i].shape_str());
    slices.push_back(native::unsqueeze(tensors[i], d));  // (..., 1, ...) views
  }
  Tensor y = native::cat(slices, d);
  if (compute_requires_grad(tensors)) {
    auto node = std::make_shared<StackBackward>();
    node->dim = d;
    for (const Tensor& t : tensors) node->dtypes.push_back(t.dtype());
    record(node, tensors, {y});
  }
  return y;
}

}  // namespace lockstep
