// nn/attention.cpp — MultiheadAttention, built from differentiable ops
// (linear, matmul, softmax, dropout), so autograd differentiates it.
//
// The packed projection qkv (B, T, 3E) is split into q, k, v by unbind over a
// (B, T, 3, E) view: one node, whose backward writes the three gradients into one
// (B, T, 3E) tensor. Three narrows would each write a zero-filled (B, T, 3E)
// gradient and the engine would add the three: for BERT-base ~38 MB more per layer
// and step (the profiler's bytes column, docs/results/bf16.md), the same values.
// LOCKSTEP_QKV_UNBIND=0 takes the narrows (A/B runs). Under bf16 autocast the dropout
// of the probabilities writes them in bf16 for the next matmul (Note [dropout writing
// the bf16 copy] in autograd/functions/autocast_ops.h).
// Read before: nn/attention.h, autograd/functions/unbind.h.
#include "nn/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/functions/autocast_ops.h"
#include "autograd/functions/unbind.h"
#include "core/env_flag.h"
#include "core/factory.h"
#include "core/nn_ops.h"
#include "nn/init.h"

namespace lockstep::nn {

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout,
                                       bool bias)
    : embed_dim(embed_dim), num_heads(num_heads), dropout(dropout) {
  LS_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0,
           "MultiheadAttention: embed_dim (", embed_dim, ") must be a positive multiple of "
           "num_heads (", num_heads, ")");
  LS_CHECK(dropout >= 0.0 && dropout <= 1.0, "MultiheadAttention: dropout must be in [0, 1] but "
           "got ", dropout);
  head_dim = embed_dim / num_heads;
  in_proj_weight = register_parameter("in_proj_weight", empty({3 * embed_dim, embed_dim}));
  if (bias) in_proj_bias = register_parameter("in_proj_bias", zeros({3 * embed_dim}));
  out_proj = register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, bias));
  // PyTorch's _reset_parameters, after out_proj has drawn its own weights.
  init::xavier_uniform_(in_proj_weight);
  if (bias) init::zeros_(out_proj->bias);
}

namespace {
constexpr const char* kOp = "MultiheadAttention.forward";

// A bool mask (true = hidden) as -inf / 0 of `dtype`, or a floating mask as is.
Tensor additive(const Tensor& m, ScalarType dtype, const char* what) {
  if (m.dtype() == kBool) {
    const double inf = std::numeric_limits<double>::infinity();
    return where(m, scalar_tensor(-inf, dtype), scalar_tensor(0.0, dtype));
  }
  LS_CHECK(m.is_floating_point(), kOp, ": ", what, " must be bool (true = ignore) or floating "
           "(added to the scores) but got ", m.dtype());
  return m.detach().to(dtype);
}

// The (B, 1, 1, T) additive key padding mask.
Tensor padding_scores(const Tensor& mask, int64_t B, int64_t T, ScalarType dtype) {
  LS_CHECK(mask.dim() == 2 && mask.size(0) == B && mask.size(1) == T, kOp,
           ": key_padding_mask must be (B, T) = [", B, ", ", T, "] but got ", mask.shape_str());
  return additive(mask.reshape({B, 1, 1, T}), dtype, "key_padding_mask");
}

// The (1, 1, T, T) or (B, H, T, T) additive attention mask.
Tensor attn_scores(const Tensor& mask, int64_t B, int64_t H, int64_t T, ScalarType dtype) {
  if (mask.dim() == 2 && mask.size(0) == T && mask.size(1) == T) {
    return additive(mask.reshape({1, 1, T, T}), dtype, "attn_mask");
  }
  LS_CHECK(mask.dim() == 3 && mask.size(0) == B * H && mask.size(1) == T && mask.size(2) == T, kOp,
           ": attn_mask must be (T, T) = [", T, ", ", T, "] or (B * num_heads, T, T) = [", B * H,
           ", ", T, ", ", T, "] but got ", mask.shape_str());
  return additive(mask.reshape({B, H, T, T}), dtype, "attn_mask");
}

// (1, 1, T, T): 0 where key <= query, -inf above the diagonal.
Tensor causal_scores(int64_t T, ScalarType dtype, Device device) {
  const TensorOptions opts = TensorOptions().dtype(kInt64).device(device);
  const Tensor key = arange(T, opts).reshape({1, T}), query = arange(T, opts).reshape({T, 1});
  const Tensor above = key.gt(query);  // (T, T) bool: the future
  return additive(above.reshape({1, 1, T, T}), dtype, "is_causal");
}
}  // namespace

AttentionMasks AttentionMasks::from_positional(const Tensor& mask, int64_t B, int64_t T,
                                               const char* op) {
  if (!mask.defined()) return AttentionMasks();
  LS_CHECK(mask.dim() == 2, op, ": a positional mask must be 2-d, (B, T) key padding or (T, T) "
           "attention mask, but got ", mask.shape_str(), "; pass a (B * num_heads, T, T) mask as "
           "ls::nn::AttentionMasks().attn_mask(m)");
  const bool padding = mask.size(0) == B && mask.size(1) == T;
  const bool square = mask.size(0) == T && mask.size(1) == T;
  LS_CHECK(!(padding && square), op, ": the mask is ", mask.shape_str(), " and the batch size "
           "equals the sequence length (B = T = ", T, "), so it could be a (B, T) key padding "
           "mask or a (T, T) attention mask (e.g. causal); say which: forward(x, "
           "ls::nn::AttentionMasks().key_padding_mask(mask)) or forward(x, "
           "ls::nn::AttentionMasks().attn_mask(mask)) (or .is_causal(true) for a causal mask)");
  if (padding) return AttentionMasks().key_padding_mask(mask);
  LS_CHECK(square, op, ": a positional mask must be (B, T) = [", B, ", ", T, "] (key padding) or "
           "(T, T) = [", T, ", ", T, "] (attention mask) but got ", mask.shape_str());
  return AttentionMasks().attn_mask(mask);
}

Tensor MultiheadAttention::forward(const Tensor& x, const Tensor& mask) {
  LS_CHECK(x.defined() && x.dim() == 3, kOp, ": expected x (B, T, ", embed_dim, ") but got ",
           x.defined() ? x.shape_str() : "an undefined tensor");
  return forward(x, AttentionMasks::from_positional(mask, x.size(0), x.size(1), kOp));
}

Tensor MultiheadAttention::forward(const Tensor& x, const AttentionMasks& masks) {
  run_forward_pre_hooks();  // Note [Forward pre-hooks], nn/module.h
  LS_CHECK(x.defined() && x.dim() == 3 && x.size(2) == embed_dim, "MultiheadAttention(",
           embed_dim, ", ", num_heads, ").forward: expected x (B, T, ", embed_dim, ") but got ",
           x.defined() ? x.shape_str() : "an undefined tensor");
  LS_CHECK(!(masks.is_causal() && masks.attn_mask().defined()), kOp, ": give either attn_mask or "
           "is_causal(true), not both (a causal attn_mask already says it)");
  const int64_t B = x.size(0), T = x.size(1), E = embed_dim, H = num_heads, D = head_dim;

  Tensor qkv = linear(x, in_proj_weight, in_proj_bias);  // (B, T, 3E)
  static const bool use_unbind = env_flag("LOCKSTEP_QKV_UNBIND", true);
  std::vector<Tensor> parts;  // q, k, v: (B, T, E) views of qkv
  if (use_unbind) parts = unbind(qkv.reshape({B, T, 3, E}), 2);
  auto split_heads = [&](int64_t i) {  // -> (B, H, T, D)
    const Tensor part = use_unbind ? parts[i] : qkv.narrow(2, i * E, E);
    return part.reshape({B, T, H, D}).transpose(1, 2);
  };
  Tensor q = split_heads(0) * (1.0 / std::sqrt(static_cast<double>(D)));
  Tensor k = split_heads(1);
  Tensor v = split_heads(2);

  Tensor scores = matmul(q, k.transpose(2, 3));  // (B, H, T, T)
  const ScalarType dt = x.dtype();
  if (masks.key_padding_mask().defined()) scores = scores + padding_scores(masks.key_padding_mask(), B, T, dt);
  if (masks.attn_mask().defined()) scores = scores + attn_scores(masks.attn_mask(), B, H, T, dt);
  if (masks.is_causal()) scores = scores + causal_scores(T, dt, x.device());
  const Tensor probs = scores.softmax(-1);  // (B, H, T, T), float32 under autocast
  Tensor attn = autograd::fuses_dropout_cast(probs)  // Note [dropout writing the bf16 copy]
                    ? autograd::dropout_to_bf16(probs, dropout, is_training())
                    : lockstep::dropout(probs, dropout, is_training());
  Tensor out = matmul(attn, v);                                      // (B, H, T, D)
  out = out.transpose(1, 2).reshape({B, T, E});                      // (B, T, E)
  return out_proj->forward(out);
}

}  // namespace lockstep::nn
