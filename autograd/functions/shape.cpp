// autograd/functions/shape.cpp — conversions and ops that only change the shape.
//
// None of these does arithmetic, so each backward moves the gradient back to
// the input's layout:
//   CloneBackward      clone, contiguous (when it copies)    g
//   ToCopyBackward     to(dtype)                             g converted back to the input's dtype
//   ToDeviceBackward   to(device)                            g copied back to the input's device
//   ViewBackward       view, reshape, flatten, squeeze,      g reshaped to the input's shape
//                      unsqueeze (named after the op: "ReshapeBackward", ...)
//   TransposeBackward  transpose(d0, d1), t()                g transposed back
//   PermuteBackward    permute(dims)                         g permuted by the inverse permutation
//   ExpandBackward     expand(sizes)                         g summed over the expanded dims (sum_to)
// View ops return views (they share the input's storage), as in PyTorch; a
// no-op conversion (contiguous() of a contiguous tensor, to() the same dtype or
// device) returns the input itself and records nothing.
//
// All of them support double backward (grad_ops.h): each formula is the op
// itself or its inverse, recorded under create_graph, so ToCopyBackward's
// conversion back is another ToCopyBackward (bf16 <-> float32 under autocast
// included) and ToDeviceBackward's copy back another ToDeviceBackward.
//
// Read before: autograd/functions/functions.h. Read next: autograd/functions/indexing.cpp.
#include "autograd/functions/functions.h"
#include "core/profiler.h"
#include "core/shape.h"

namespace lockstep::autograd {
namespace {

struct CloneBackward final : DoubleBackwardNode {
  std::string name() const override { return "CloneBackward"; }
  variable_list apply(variable_list&& grads) override { return {grads[0]}; }
};

struct ToCopyBackward final : DoubleBackwardNode {
  ScalarType self_dtype = kFloat32;
  std::string name() const override { return "ToCopyBackward"; }
  variable_list apply(variable_list&& grads) override {
    return {grad_ops::to_dtype(grads[0], self_dtype)};
  }
};

struct ToDeviceBackward final : DoubleBackwardNode {
  Device self_device;
  std::string name() const override { return "ToDeviceBackward"; }
  variable_list apply(variable_list&& grads) override {
    return {grad_ops::to_device(grads[0], self_device)};
  }
};

struct ViewBackward final : DoubleBackwardNode {
  IntList self_sizes;
  const char* name_ = "ViewBackward";
  std::string name() const override { return name_; }
  variable_list apply(variable_list&& grads) override {
    return {grad_ops::reshape(grads[0], self_sizes)};
  }
};

struct TransposeBackward final : DoubleBackwardNode {
  int64_t dim0 = 0, dim1 = 1;
  std::string name() const override { return "TransposeBackward"; }
  variable_list apply(variable_list&& grads) override {
    return {grad_ops::transpose(grads[0], dim0, dim1)};
  }
};

struct PermuteBackward final : DoubleBackwardNode {
  IntList inverse;  // inverse[dims[i]] = i
  std::string name() const override { return "PermuteBackward"; }
  variable_list apply(variable_list&& grads) override {
    return {grad_ops::permute(grads[0], inverse)};
  }
};

struct ExpandBackward final : DoubleBackwardNode {
  IntList self_sizes;
  std::string name() const override { return "ExpandBackward"; }
  variable_list apply(variable_list&& grads) override {
    return {grad_ops::sum_to(grads[0], self_sizes)};
  }
};

// Records a ViewBackward named `name` for a shape-only op from x to y.
Tensor record_view(Tensor y, const Tensor& x, const char* name) {
  if (compute_requires_grad({x})) {
    auto node = std::make_shared<ViewBackward>();
    node->self_sizes = x.sizes();
    node->name_ = name;
    record(node, {x}, {y});
  }
  return y;
}

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the ops that record these nodes

// ---- conversions ----

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  profiler::Scope prof("clone");
  Tensor y = native::clone(*this);
  if (compute_requires_grad({*this})) record(std::make_shared<CloneBackward>(), {*this}, {y});
  return y;
}

Tensor Tensor::to(ScalarType dtype) const {
  profiler::Scope prof("to");
  if (dtype == this->dtype()) return *this;
  Tensor y = native::to_dtype(*this, dtype);
  // A conversion to an integer type ends the graph, as in PyTorch: ints hold no gradient.
  if (lockstep::is_floating_point(dtype) && compute_requires_grad({*this})) {
    auto node = std::make_shared<ToCopyBackward>();
    node->self_dtype = this->dtype();
    record(node, {*this}, {y});
  }
  return y;
}

// A copy on `device` (CPU <-> CUDA, or between CUDA devices); in a CPU-only build
// asking for a CUDA device throws an error that says the build lacks CUDA.
Tensor Tensor::to(Device device) const {
  profiler::Scope prof("to");
  if (device == this->device()) return *this;
  Tensor y = native::to_device(*this, device);
  if (compute_requires_grad({*this})) {
    auto node = std::make_shared<ToDeviceBackward>();
    node->self_device = this->device();
    record(node, {*this}, {y});
  }
  return y;
}

// ---- views and reshapes ----

Tensor Tensor::reshape(const IntList& sizes) const {
  profiler::Scope prof("reshape");
  return record_view(native::reshape(*this, sizes), *this, "ReshapeBackward");
}

Tensor Tensor::view(const IntList& sizes) const {
  profiler::Scope prof("view");
  return record_view(native::view(*this, sizes), *this, "ViewBackward");
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  profiler::Scope prof("flatten");
  return record_view(native::flatten(*this, start_dim, end_dim), *this, "FlattenBackward");
}

Tensor Tensor::unsqueeze(int64_t dim) const {
  profiler::Scope prof("unsqueeze");
  return record_view(native::unsqueeze(*this, dim), *this, "UnsqueezeBackward");
}

Tensor Tensor::squeeze(int64_t dim) const {
  profiler::Scope prof("squeeze");
  return record_view(native::squeeze(*this, dim), *this, "SqueezeBackward");
}

Tensor Tensor::squeeze() const {
  profiler::Scope prof("squeeze");
  return record_view(native::squeeze(*this), *this, "SqueezeBackward");
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  profiler::Scope prof("transpose");
  Tensor y = native::transpose(*this, dim0, dim1);
  if (compute_requires_grad({*this})) {
    auto node = std::make_shared<TransposeBackward>();
    node->dim0 = dim0;
    node->dim1 = dim1;
    record(node, {*this}, {y});
  }
  return y;
}

Tensor Tensor::t() const {
  LS_CHECK(dim() <= 2, "t: expects a tensor with at most 2 dims but got shape ", shape_str(),
           "; use transpose(dim0, dim1) or permute(dims) for more dims");
  if (dim() < 2) return record_view(native::view(*this, sizes()), *this, "TBackward");
  return transpose(0, 1);
}

Tensor Tensor::permute(const IntList& dims) const {
  profiler::Scope prof("permute");
  Tensor y = native::permute(*this, dims);
  if (compute_requires_grad({*this})) {
    auto node = std::make_shared<PermuteBackward>();
    node->inverse.resize(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) {
      node->inverse[wrap_dim(dims[i], dim(), "permute")] = static_cast<int64_t>(i);
    }
    record(node, {*this}, {y});
  }
  return y;
}

Tensor Tensor::expand(const IntList& sizes) const {
  profiler::Scope prof("expand");
  Tensor y = native::expand(*this, sizes);
  if (compute_requires_grad({*this})) {
    auto node = std::make_shared<ExpandBackward>();
    node->self_sizes = this->sizes();
    record(node, {*this}, {y});
  }
  return y;
}

}  // namespace lockstep
