// nn/attention.cpp — MultiheadAttention, built from differentiable ops
// (linear, matmul, softmax, dropout), so autograd differentiates it.
// Read before: nn/attention.h.
#include "nn/attention.h"

#include <cmath>
#include <limits>

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
// The (B, 1, 1, T) additive mask: -inf where a bool mask is true, or a float mask as is.
Tensor additive_mask(const Tensor& mask, int64_t B, int64_t T, ScalarType dtype) {
  LS_CHECK(mask.dim() == 2 && mask.size(0) == B && mask.size(1) == T,
           "MultiheadAttention.forward: key_padding_mask must be (B, T) = [", B, ", ", T,
           "] but got ", mask.shape_str());
  Tensor m = mask.reshape({B, 1, 1, T});
  if (mask.dtype() == kBool) {
    const double inf = std::numeric_limits<double>::infinity();
    return where(m, scalar_tensor(-inf, dtype), scalar_tensor(0.0, dtype));
  }
  LS_CHECK(mask.is_floating_point(), "MultiheadAttention.forward: key_padding_mask must be bool "
           "(true = ignore) or floating (added to the scores) but got ", mask.dtype());
  return m.detach().to(dtype);
}
}  // namespace

Tensor MultiheadAttention::forward(const Tensor& x, const Tensor& key_padding_mask) {
  LS_CHECK(x.defined() && x.dim() == 3 && x.size(2) == embed_dim, "MultiheadAttention(",
           embed_dim, ", ", num_heads, ").forward: expected x (B, T, ", embed_dim, ") but got ",
           x.defined() ? x.shape_str() : "an undefined tensor");
  const int64_t B = x.size(0), T = x.size(1), E = embed_dim, H = num_heads, D = head_dim;

  Tensor qkv = linear(x, in_proj_weight, in_proj_bias);  // (B, T, 3E)
  auto split_heads = [&](int64_t i) {                    // -> (B, H, T, D)
    return qkv.narrow(2, i * E, E).reshape({B, T, H, D}).transpose(1, 2);
  };
  Tensor q = split_heads(0) * (1.0 / std::sqrt(static_cast<double>(D)));
  Tensor k = split_heads(1);
  Tensor v = split_heads(2);

  Tensor scores = matmul(q, k.transpose(2, 3));  // (B, H, T, T)
  if (key_padding_mask.defined()) scores = scores + additive_mask(key_padding_mask, B, T, x.dtype());
  Tensor attn = lockstep::dropout(scores.softmax(-1), dropout, is_training());  // (B, H, T, T)
  Tensor out = matmul(attn, v);                                      // (B, H, T, D)
  out = out.transpose(1, 2).reshape({B, T, E});                      // (B, T, E)
  return out_proj->forward(out);
}

}  // namespace lockstep::nn
