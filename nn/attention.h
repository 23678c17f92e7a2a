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
//
// § Note [Attention masks]
// Two masks mean different things: a key padding mask (B, T) hides keys per
// example (padding), an attention mask (T, T) — or (B * H, T, T), one per head —
// hides keys per query (a causal mask hides the future); is_causal builds the
// causal one (query t sees keys 0..t). Named, they cannot be confused:
//   mha->forward(x, ls::nn::AttentionMasks().key_padding_mask(pad).is_causal(true));
//   mha->forward(x, ls::nn::AttentionMasks().attn_mask(m));
// Both kinds are bool (true = hidden, PyTorch's convention) or floating (added
// to the scores). A mask passed positionally, forward(x, mask), is told by its
// shape: (B, T) is key padding, (T, T) an attention mask. When B == T the
// shape says nothing, and forward refuses it with a message naming the two
// spellings above instead of guessing (libtorch's TransformerEncoderLayer takes
// src_mask second, lockstep's forward(x, mask) took key padding: the same call
// meant different masks). Giving both attn_mask and is_causal is refused too.
// Read before: nn/linear.h, nn/dropout.h. Read next: nn/transformer.h.
#pragma once

#include <memory>

#include "nn/linear.h"

namespace lockstep::nn {

// The masks of one attention call, by name (Note [Attention masks]).
class AttentionMasks {
 public:
  AttentionMasks key_padding_mask(Tensor m) const { auto o = *this; o.key_padding_ = std::move(m); return o; }
  AttentionMasks attn_mask(Tensor m) const { auto o = *this; o.attn_ = std::move(m); return o; }
  AttentionMasks is_causal(bool c) const { auto o = *this; o.causal_ = c; return o; }
  const Tensor& key_padding_mask() const { return key_padding_; }  // (B, T)
  const Tensor& attn_mask() const { return attn_; }                // (T, T) or (B * H, T, T)
  bool is_causal() const { return causal_; }

  // A positional mask sorted by its shape for x (B, T, ...); throws when B == T.
  static AttentionMasks from_positional(const Tensor& mask, int64_t B, int64_t T, const char* op);

 private:
  Tensor key_padding_, attn_;
  bool causal_ = false;
};

struct MultiheadAttention : Module {
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true);

  std::string type_name() const override { return "MultiheadAttention"; }
  bool runs_forward_pre_hooks() const override { return true; }  // Note [Forward pre-hooks]
  // (B, T, E) -> (B, T, E); a positional mask is (B, T) key padding or (T, T)
  // attention mask, told by shape (Note [Attention masks]).
  Tensor forward(const Tensor& x, const Tensor& mask = Tensor());
  Tensor forward(const Tensor& x, const AttentionMasks& masks);

  int64_t embed_dim, num_heads, head_dim;
  double dropout;
  Tensor in_proj_weight;  // (3E, E)
  Tensor in_proj_bias;    // (3E)
  std::shared_ptr<Linear> out_proj;
};

}  // namespace lockstep::nn
