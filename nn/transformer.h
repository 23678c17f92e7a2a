// nn/transformer.h — TransformerEncoderLayer: self-attention + feed-forward,
// post-norm like BERT and torch.nn.TransformerEncoderLayer(norm_first=False),
// batch-first (B, T, d_model):
//   x = norm1(x + dropout1(self_attn(x, masks)))
//   x = norm2(x + dropout2(linear2(dropout(activation(linear1(x))))))
// Children in PyTorch's order and names: self_attn, linear1, dropout, linear2,
// norm1, norm2, dropout1, dropout2 — so parameter names match
// ("self_attn.in_proj_weight", "linear1.weight", "norm2.bias", ...).
// activation is "gelu" (BERT's; the default here) or "relu" (PyTorch's default).
// Read before: nn/attention.h, nn/layer_norm.h. Read next: models/bert.h.
#pragma once

#include <memory>
#include <string>

#include "nn/attention.h"
#include "nn/dropout.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"

namespace lockstep::nn {

struct TransformerEncoderLayer : Module {
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward,
                          double dropout = 0.1, const std::string& activation = "gelu",
                          double layer_norm_eps = 1e-5);

  std::string type_name() const override { return "TransformerEncoderLayer"; }
  // (B, T, d_model) -> (B, T, d_model); the masks as MultiheadAttention's
  // (Note [Attention masks] in nn/attention.h: a positional mask is told by shape).
  Tensor forward(const Tensor& x, const Tensor& mask = Tensor());
  Tensor forward(const Tensor& x, const AttentionMasks& masks);

  std::string activation;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1;
  std::shared_ptr<Dropout> dropout;
  std::shared_ptr<Linear> linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Dropout> dropout1, dropout2;
};

}  // namespace lockstep::nn
