// autograd/functions/embedding.cpp — ls::embedding, a differentiable table lookup.
//
// Only the table (weight) gets a gradient; the indices are integers. The node
// keeps the indices and the table's row count, and its backward scatters the
// output gradient back into a zero table (native::embedding_backward), leaving
// the padding_idx row at zero. The gradient is dense (num, dim), as PyTorch's
// default (sparse=False), so DDP can bucket and AllReduce it like any other.
// With create_graph the scatter is a linear map whose adjoint is the lookup
// itself, the padding_idx rows read as zero (Note [Linear backward formulas]).
//
// Read before: autograd/functions/functions.h, core/native/embedding.cpp.
// Read next: autograd/functions/dropout.cpp.
#include "autograd/functions/functions.h"
#include "autograd/functions/linear_map.h"
#include "core/native/nn_kernels_transformer.h"
#include "core/nn_ops.h"
#include "core/profiler.h"

namespace lockstep::autograd {
namespace {

struct EmbeddingBackward final : DoubleBackwardNode {
  SavedVariable indices;
  int64_t num_weights = 0;
  int64_t padding_idx = -1;
  ScalarType dtype = kFloat32;  // of weight
  std::string name() const override { return "EmbeddingBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor idx = indices.unpack(name());
    if (grad_ops::recording()) return {apply_linear_map(grads[0], linear_map(idx))};
    const Tensor g = native::to_dtype(grads[0], dtype);  // (*indices, dim)
    return {native::embedding_backward(g, idx, num_weights, padding_idx)};
  }
  std::shared_ptr<const LinearMap> linear_map(const Tensor& idx) const {
    auto map = [idx, n = num_weights, pad = padding_idx, dtype = dtype](const Tensor& g) {
      return native::embedding_backward(native::to_dtype(g, dtype), idx, n, pad);  // (n, dim)
    };
    auto adjoint = [idx, pad = padding_idx](const Tensor& w) {  // (n, dim) -> (*indices, dim)
      Tensor rows = native::embedding_forward(w, idx, pad);
      if (pad < 0) return rows;
      // The padding row got no gradient, so its rows of the lookup are constant zeros.
      Tensor is_pad = native::unsqueeze(
          native::compare_scalar(native::CompareOp::Eq, idx, static_cast<double>(pad)), idx.dim());
      return native::where(is_pad, zero_scalar(rows.dtype(), rows.device()), rows);
    };
    return make_linear_map(name(), map, adjoint);
  }
  void release_variables() override { indices.reset(); }
};

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the op that records this node

Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
  profiler::Scope prof("embedding");
  Tensor out = native::embedding_forward(weight, indices, padding_idx);  // (*indices, dim)
  if (compute_requires_grad({weight})) {
    auto node = std::make_shared<EmbeddingBackward>();
    node->indices = SavedVariable(indices);
    node->num_weights = weight.size(0);
    node->padding_idx = padding_idx;
    node->dtype = weight.dtype();
    record(node, {weight}, {out});
  }
  return out;
}

}  // namespace lockstep
