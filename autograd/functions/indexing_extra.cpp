// autograd/functions/indexing_extra.cpp — libtorch's indexing spellings:
// operator[], slice, gather, scatter, masked_fill, tril, triu.
//
//   GatherBackward   y = x.gather(d, idx)         dx = zeros(x).scatter_add_(d, idx, g)
//   ScatterBackward  y = x.scatter(d, idx, src)   dx = g.scatter(d, idx, 0)   dsrc = g.gather(d, idx)
// operator[] is select(0, i); slice is narrow (a view) for step 1 and
// index_select (a copy) for larger steps; masked_fill, tril and triu are
// where() with a bool mask, so their gradients are where's (zero where the
// value was replaced). With create_graph GatherBackward's scatter-add runs as
// a linear map whose adjoint is the gather (Note [Linear backward formulas]).
// Read before: autograd/functions/indexing.cpp, core/native/gather.h.
// Read next: autograd/functions/unary.cpp.
#include <algorithm>

#include "autograd/functions/functions.h"
#include "autograd/functions/linear_map.h"
#include "core/factory.h"
#include "core/native/gather.h"
#include "core/profiler.h"
#include "core/shape.h"

namespace lockstep::autograd {
namespace {

// zeros of self's shape with g added at the gathered positions.
Tensor gather_backward(const Tensor& g, const InputMeta& self, Device device, int64_t dim,
                       const Tensor& index) {
  Tensor dx = native::zeros(self.sizes, g.dtype(), device);
  native::scatter_add_(dx, dim, index, g);
  return native::to_dtype(dx, self.dtype);
}

struct GatherBackward final : DoubleBackwardNode {
  InputMeta self;
  Device device;
  int64_t dim = 0;
  SavedVariable index;
  std::string name() const override { return "GatherBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor idx = index.unpack(name());
    if (!grad_ops::recording()) return {gather_backward(grads[0], self, device, dim, idx)};
    return {apply_linear_map(grads[0], make_linear_map(
        name(),
        [self = self, device = device, d = dim, idx](const Tensor& g) {
          return gather_backward(g, self, device, d, idx);
        },
        [d = dim, idx](const Tensor& x) { return native::gather(x, d, idx); }))};
  }
  void release_variables() override { index.reset(); }
};

struct ScatterBackward final : BackwardNode {
  int64_t dim = 0;
  SavedVariable index;
  IntList src_sizes;  // src may be larger than index outside dim; its extra elements get 0
  std::string name() const override { return "ScatterBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];
    const Tensor idx = index.unpack(name());
    Tensor dself, dsrc;
    if (should_compute_output(0)) {
      dself = native::scatter(g, dim, idx, native::zeros(idx.sizes(), g.dtype(), g.device()));
    }
    if (should_compute_output(1)) {
      dsrc = native::gather(g, dim, idx);  // index's shape
      if (dsrc.sizes() != src_sizes) {
        Tensor full = native::zeros(src_sizes, g.dtype(), g.device());
        Tensor part = full;
        for (int64_t k = 0; k < idx.dim(); ++k) part = native::narrow(part, k, 0, idx.size(k));
        native::copy_(part, dsrc);
        dsrc = full;
      }
    }
    return {dself, dsrc};
  }
  void release_variables() override { index.reset(); }
};

// (R, C) bool: true where column - row <= diagonal (keep_lower) or >= diagonal.
Tensor triangle_mask(const Tensor& t, int64_t diagonal, bool keep_lower, const char* op) {
  LS_CHECK(t.dim() >= 2, op, ": needs a tensor of at least 2 dims but got shape ", t.shape_str());
  const int64_t R = t.size(-2), C = t.size(-1);
  const TensorOptions opts = TensorOptions().dtype(kInt64).device(t.device());
  Tensor cols = native::view(arange(C, opts), {1, C});  // (1, C)
  Tensor rows = native::view(arange(R, opts), {R, 1});  // (R, 1)
  Tensor offset = native::binary(native::BinaryOp::Sub, cols, rows);  // (R, C): column - row
  return native::compare_scalar(keep_lower ? native::CompareOp::Le : native::CompareOp::Ge, offset,
                                static_cast<double>(diagonal));
}

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the ops that record these nodes

Tensor Tensor::operator[](int64_t index) const { return select(0, index); }

Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  detail::check_defined(*this, "slice");
  LS_CHECK(step > 0, "slice: step must be positive but got ", step);
  const int64_t d = wrap_dim(dim, this->dim(), "slice");
  const int64_t n = size(d);
  // Python's clamping: negative bounds count from the end, then clamp to [0, n].
  auto clamp = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  const int64_t lo = clamp(start), hi = std::max(lo, clamp(end));
  if (step == 1) return narrow(d, lo, hi - lo);
  return index_select(d, arange(lo, hi, step, TensorOptions().dtype(kInt64).device(device())));
}

Tensor Tensor::gather(int64_t dim, const Tensor& index) const {
  profiler::Scope prof("gather");
  Tensor y = native::gather(*this, dim, index);
  if (compute_requires_grad({*this})) {
    auto node = std::make_shared<GatherBackward>();
    node->self = InputMeta(*this);
    node->device = device();
    node->dim = wrap_dim(dim, this->dim(), "gather");
    node->index = SavedVariable(index);
    record(node, {*this}, {y});
  }
  return y;
}

Tensor Tensor::scatter(int64_t dim, const Tensor& index, const Tensor& src) const {
  profiler::Scope prof("scatter");
  Tensor y = native::scatter(*this, dim, index, src);
  if (compute_requires_grad({*this, src})) {
    LS_CHECK(src.dtype() == dtype(), "scatter: src (", src.dtype(), ") must have self's dtype (", dtype(),
             ") when a gradient is needed; convert src with .to(", dtype_name(dtype()), ")");
    auto node = std::make_shared<ScatterBackward>();
    node->dim = wrap_dim(dim, this->dim(), "scatter");
    node->index = SavedVariable(index);
    node->src_sizes = src.sizes();
    record(node, {*this, src}, {y});
  }
  return y;
}

Tensor Tensor::masked_fill(const Tensor& mask, double value) const {
  detail::check_defined(*this, "masked_fill");
  LS_CHECK(mask.defined() && mask.dtype() == kBool, "masked_fill: mask must be a bool tensor but got ",
           mask.defined() ? dtype_name(mask.dtype()) : "an undefined tensor",
           "; make one with a comparison such as x.gt(0)");
  LS_CHECK(broadcast_shapes(mask.sizes(), sizes(), "masked_fill") == sizes(), "masked_fill: mask ",
           mask.shape_str(), " must broadcast to self's shape ", shape_str());
  const Tensor fill = native::zeros({}, dtype(), device());  // ()
  native::fill_(fill, value);
  return where(mask, fill, *this);
}

Tensor Tensor::tril(int64_t diagonal) const {
  const Tensor zero = native::zeros({}, dtype(), device());
  return where(triangle_mask(*this, diagonal, /*keep_lower=*/true, "tril"), *this, zero);
}

Tensor Tensor::triu(int64_t diagonal) const {
  const Tensor zero = native::zeros({}, dtype(), device());
  return where(triangle_mask(*this, diagonal, /*keep_lower=*/false, "triu"), *this, zero);
}

}  // namespace lockstep
