// nn/attention.h — MultiheadAttention: scaled dot-product self-attention with
// several heads, batch-first, with torch.nn.MultiheadAttention's parameters.
//
// Parameters (PyTorch's names, order and initialisation):
//   in_proj_weight (3E, E)  xavier_uniform_; rows [0, E) project queries,
//                           [E, 2E) keys, [2E, 3E) values
//   in_proj_bias   (3E)     zeros (absent with bias = false)
//   out_proj.weight (E, E), out_proj.bias (E): a Linear child, bias zeroed
//
// forward(x, key_padding_mask), x (B, T, E), self-attention (query = key = value = x):
//   q, k, v = split(x W_in^T + b_in)               each (B, H, T, D), D = E / H
//   scores  = (q / sqrt(D)) k^T                    (B, H, T, T)
//   scores += mask                                 -inf at keys to ignore
//   out     = dropout(softmax(scores)) v           (B, H, T, D)
//   return out_proj(concat heads)                  (B, T, E)
// key_padding_mask is bool (B, T) with true = ignore that key (PyTorch's
// convention), or a float (B, T) added to the scores. Masked keys get exactly
// zero weight; a query whose keys are all masked gets NaN, as in PyTorch.
// Unlike PyTorch, forward returns only the output, not the attention weights.
// Read before: nn/linear.h, nn/dropout.h. Read next: nn/transformer.h.
#pragma once

#include <memory>

#include "nn/linear.h"

namespace lockstep::nn {

struct MultiheadAttention : Module {
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true);

  std::string type_name() const override { return "MultiheadAttention"; }
  // (B, T, E), optional (B, T) mask -> (B, T, E)
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask = Tensor());

  int64_t embed_dim, num_heads, head_dim;
  double dropout;
  Tensor in_proj_weight;  // (3E, E)
  Tensor in_proj_bias;    // (3E)
  std::shared_ptr<Linear> out_proj;
};

}  // namespace lockstep::nn
