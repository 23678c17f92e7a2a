// core/native/embedding.cpp — looking rows up in a table, and the gradient of the lookup.
//
// An embedding is index_select along dim 0 of weight (num, dim): indices of any
// shape (*) are flattened, their rows gathered into (n, dim), and the result
// reshaped to (*, dim). Backward is the matching scatter: each row of the output
// gradient is added into row indices[i] of a zero (num, dim) table
// (native::index_add_), so a token that appears k times gets the sum of k rows.
// The padding_idx row (a "no token" slot, e.g. [PAD]) is zeroed afterwards: only
// lookups of padding_idx itself added into it, so this drops exactly their gradient.
//
// Unlike index_select, negative indices are an error, as in PyTorch: a token id
// of -1 is almost always a data bug, not "the last row".
//
// Read before: core/native/index.cpp. Read next: core/native/dropout.cpp.
#include <vector>

#include "core/native/cuda_dispatch.h"
#include "core/native/native.h"
#include "core/native/nn_kernels_transformer.h"

namespace lockstep::native {

namespace {

// indices as a flat int64 tensor, after checking dtype and range.
Tensor checked_indices(const Tensor& indices, int64_t num, const char* op) {
  LS_CHECK(indices.defined(), op, ": indices is an undefined tensor");
  LS_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32, op,
           ": indices must be int64 or int32, got ", dtype_name(indices.dtype()),
           "; convert with .to(ls::kInt64)");
  const Tensor flat = reshape(to_dtype(indices, kInt64), {-1});  // (n)
  const std::vector<int64_t> idx = flat.to_vector<int64_t>();
  for (size_t i = 0; i < idx.size(); ++i) {
    LS_CHECK(idx[i] >= 0 && idx[i] < num, op, ": index ", idx[i], " (at flat position ", i,
             " of indices ", indices.shape_str(), ") is out of range for num_embeddings ", num,
             "; indices must be in [0, ", num, ")");
  }
  return flat;
}

void check_padding_idx(int64_t padding_idx, int64_t num, const char* op) {
  LS_CHECK(padding_idx >= -1 && padding_idx < num, op, ": padding_idx ", padding_idx,
           " must be -1 (none) or in [0, ", num, ") for num_embeddings ", num);
}

// (*indices, dim): the output shape of a lookup.
IntList lookup_shape(const Tensor& indices, int64_t dim) {
  IntList sizes = indices.sizes();
  sizes.push_back(dim);
  return sizes;
}

}  // namespace

Tensor embedding_forward(const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
  LS_DISPATCH_CUDA(weight, embedding_forward(weight, indices, padding_idx));
  LS_CHECK(weight.defined() && weight.dim() == 2,
           "embedding: weight must be 2-d (num_embeddings, embedding_dim), got ",
           weight.defined() ? weight.shape_str() : "(undefined)");
  const int64_t num = weight.size(0), dim = weight.size(1);
  check_padding_idx(padding_idx, num, "embedding");
  const Tensor flat = checked_indices(indices, num, "embedding");             // (n)
  return reshape(index_select(weight, 0, flat), lookup_shape(indices, dim));  // (*, dim)
}

Tensor embedding_backward(const Tensor& grad_output, const Tensor& indices, int64_t num_weights,
                          int64_t padding_idx) {
  LS_DISPATCH_CUDA(grad_output, embedding_backward(grad_output, indices, num_weights, padding_idx));
  LS_CHECK(grad_output.defined() && grad_output.dim() == indices.dim() + 1,
           "embedding_backward: grad_output ",
           grad_output.defined() ? grad_output.shape_str() : "(undefined)",
           " must have shape (*indices, embedding_dim) for indices ", indices.shape_str());
  check_padding_idx(padding_idx, num_weights, "embedding_backward");
  const int64_t dim = grad_output.size(-1);
  const Tensor flat = checked_indices(indices, num_weights, "embedding_backward");  // (n)
  Tensor grad_weight = zeros({num_weights, dim}, grad_output.dtype());              // (num, dim)
  index_add_(grad_weight, 0, flat, reshape(grad_output, {flat.numel(), dim}));
  if (padding_idx >= 0) fill_(select(grad_weight, 0, padding_idx), 0.0);
  return grad_weight;
}

}  // namespace lockstep::native
