// nn/embedding.cpp — Embedding's construction and forward.
// Read before: nn/embedding.h.
#include "nn/embedding.h"

#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/nn_ops.h"
#include "nn/init.h"

namespace lockstep::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx)
    : num_embeddings(num_embeddings), embedding_dim(embedding_dim), padding_idx(padding_idx) {
  LS_CHECK(num_embeddings > 0 && embedding_dim > 0, "Embedding: num_embeddings and embedding_dim "
           "must be positive but got Embedding(", num_embeddings, ", ", embedding_dim, ")");
  LS_CHECK(padding_idx >= -1 && padding_idx < num_embeddings, "Embedding: padding_idx must be -1 "
           "(none) or in [0, ", num_embeddings, ") but got ", padding_idx);
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  init::normal_(weight);
  if (padding_idx >= 0) {
    NoGradGuard no_grad;
    weight.select(0, padding_idx).zero_();
  }
}

Tensor Embedding::forward(const Tensor& indices) {
  run_forward_pre_hooks();  // Note [Forward pre-hooks], nn/module.h
  LS_CHECK(indices.defined() && (indices.dtype() == kInt64 || indices.dtype() == kInt32),
           "Embedding(", num_embeddings, ", ", embedding_dim, ").forward: expected int64 indices "
           "but got ", indices.defined() ? dtype_name(indices.dtype()) : "an undefined tensor");
  return embedding(weight, indices, padding_idx);
}

}  // namespace lockstep::nn
