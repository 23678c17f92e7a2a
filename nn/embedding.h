// nn/embedding.h — Embedding: a lookup table of num_embeddings rows of size dim.
//
// weight (num_embeddings, embedding_dim) starts N(0, 1), as in PyTorch; the
// row at padding_idx (if given, >= 0) starts at zero and gets no gradient.
// Input: int64 indices of any shape -> (*indices, embedding_dim).
// Read before: nn/layer_norm.h. Read next: nn/dropout.h.
#pragma once

#include "nn/unary_module.h"

namespace lockstep::nn {

struct Embedding : UnaryModule {
  // padding_idx = -1: no padding row.
  Embedding(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx = -1);

  std::string type_name() const override { return "Embedding"; }
  bool runs_forward_pre_hooks() const override { return true; }  // Note [Forward pre-hooks]
  LS_NOT_A_HOLDER(Embedding)
  Tensor forward(const Tensor& indices) override;  // (*) int64 -> (*, dim)

  int64_t num_embeddings, embedding_dim, padding_idx;
  Tensor weight;  // (num_embeddings, embedding_dim)
};

}  // namespace lockstep::nn
