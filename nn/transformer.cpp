// nn/transformer.cpp — TransformerEncoderLayer's construction and forward.
// Under bf16 autocast the feed-forward's linear1 + GELU is one node (Note [linear + GELU
// in one node] in autograd/functions/autocast_ops.h), in training with its dropout (Note
// [linear + GELU + dropout in one node] in autograd/functions/autocast_fused_dropout.h),
// and a post-norm layer's residual sums are normalised in their pass (Note [dropout +
// residual add + LayerNorm in one pass]).
// Read before: nn/transformer.h.
#include "nn/transformer.h"

#include "autograd/functions/autocast_fused_dropout.h"
#include "autograd/functions/autocast_ops.h"

namespace lockstep::nn {

namespace {

// x + d(y) for a residual x and a branch y: one op under bf16 autocast (Note [dropout +
// residual add in one pass] in autograd/functions/autocast_ops.h).
Tensor add_dropped(const Tensor& x, const Tensor& y, Dropout& d) {
  if (autograd::fuses_dropout_add(x, y, d.p, d.is_training())) {
    return autograd::dropout_add(x, y, d.p);
  }
  return x + d.forward(y);
}

// norm(x + d(y)) of a post-norm layer: one op under bf16 autocast (Note [dropout +
// residual add + LayerNorm in one pass] in autograd/functions/autocast_fused_dropout.h).
Tensor norm_of_add_dropped(const Tensor& x, const Tensor& y, Dropout& d, LayerNorm& norm) {
  if (autograd::fuses_dropout_add_layer_norm(x, y, d.p, d.is_training(), norm.weight,
                                             norm.bias)) {
    norm.run_forward_pre_hooks();  // it reads norm's parameters without its forward: Note [Forward pre-hooks]
    return autograd::dropout_add_layer_norm(x, y, d.p, norm.normalized_shape, norm.weight,
                                            norm.bias, norm.eps);
  }
  return norm.forward(add_dropped(x, y, d));
}

}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerEncoderLayerOptions& o) : options(o) {
  LS_CHECK(o.activation() == "gelu" || o.activation() == "relu", "TransformerEncoderLayer: "
           "activation must be \"gelu\" or \"relu\" but got \"", o.activation(), "\"");
  LS_CHECK(o.dim_feedforward() > 0, "TransformerEncoderLayer: dim_feedforward must be positive "
           "but got ", o.dim_feedforward());
  const int64_t d = o.d_model();
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(d, o.nhead(), o.dropout()));
  linear1 = register_module("linear1", std::make_shared<Linear>(d, o.dim_feedforward()));
  dropout = register_module("dropout", std::make_shared<Dropout>(o.dropout()));
  linear2 = register_module("linear2", std::make_shared<Linear>(o.dim_feedforward(), d));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(d, o.layer_norm_eps()));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(d, o.layer_norm_eps()));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(o.dropout()));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(o.dropout()));
}

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead,
                                                 int64_t dim_feedforward, double dropout_p,
                                                 const std::string& activation,
                                                 double layer_norm_eps)
    : TransformerEncoderLayer(TransformerEncoderLayerOptions(d_model, nhead)
                                  .dim_feedforward(dim_feedforward)
                                  .dropout(dropout_p)
                                  .activation(activation)
                                  .layer_norm_eps(layer_norm_eps)
                                  .batch_first(true)) {}

AttentionMasks masks_of(const Tensor& src_mask, const Tensor& src_key_padding_mask) {
  AttentionMasks masks;
  if (src_mask.defined()) masks = masks.attn_mask(src_mask);
  if (src_key_padding_mask.defined()) masks = masks.key_padding_mask(src_key_padding_mask);
  return masks;
}

void check_src(const Tensor& src, bool batch_first, const char* op) {
  LS_CHECK(src.defined() && src.dim() == 3, op, ": expected src ",
           batch_first ? "(B, T, d_model)" : "(T, B, d_model)", " but got ",
           src.defined() ? src.shape_str() : "an undefined tensor");
}

AttentionMasks positional_masks(const Tensor& src, const Tensor& mask, bool batch_first, const char* op) {
  check_src(src, batch_first, op);
  const Tensor xb = to_batch_first(src, batch_first);
  return AttentionMasks::from_positional(mask, xb.size(0), xb.size(1), op);
}

namespace {
constexpr const char* kOp = "TransformerEncoderLayer.forward";
}  // namespace

Tensor TransformerEncoderLayer::forward(const Tensor& x, const Tensor& mask) {
  return forward(x, positional_masks(x, mask, options.batch_first(), kOp));
}

Tensor TransformerEncoderLayer::forward(const Tensor& x, const Tensor& src_mask,
                                        const Tensor& src_key_padding_mask) {
  return forward(x, masks_of(src_mask, src_key_padding_mask));
}

Tensor TransformerEncoderLayer::forward(const Tensor& x, const AttentionMasks& masks) {
  check_src(x, options.batch_first(), kOp);
  const Tensor y = forward_batch_first(to_batch_first(x, options.batch_first()), masks);
  return to_batch_first(y, options.batch_first());  // a transpose is its own inverse
}

Tensor TransformerEncoderLayer::feed_forward_branch(const Tensor& x) {
  const bool gelu = options.activation() == "gelu";
  if (gelu && autograd::fuses_linear_gelu_dropout(x, linear1->weight, linear1->bias, dropout->p,
                                                  dropout->is_training())) {
    // One node for the three: Note [linear + GELU + dropout in one node]. It
    // reads linear1's parameters without its forward: Note [Forward pre-hooks].
    linear1->run_forward_pre_hooks();
    const Tensor f = autograd::linear_gelu_dropout_autocast(x, linear1->weight, linear1->bias,
                                                            dropout->p);  // (B, T, ffn)
    return linear2->forward(f);  // (B, T, d_model), before dropout2
  }
  Tensor f;  // (B, T, ffn)
  if (gelu && autograd::fuses_linear_gelu(x, linear1->weight, linear1->bias)) {
    // One node for both: Note [linear + GELU in one node]. It reads linear1's
    // parameters without its forward: Note [Forward pre-hooks].
    linear1->run_forward_pre_hooks();
    f = autograd::linear_gelu_autocast(x, linear1->weight, linear1->bias);
  } else {
    f = linear1->forward(x);
    f = gelu ? f.gelu() : f.relu();
  }
  return linear2->forward(dropout->forward(f));  // (B, T, d_model), before dropout2
}

Tensor TransformerEncoderLayer::feed_forward(const Tensor& x) {
  return dropout2->forward(feed_forward_branch(x));  // (B, T, d_model)
}

Tensor TransformerEncoderLayer::forward_batch_first(const Tensor& x, const AttentionMasks& masks) {
  if (options.norm_first()) {
    const Tensor h = add_dropped(x, self_attn->forward(norm1->forward(x), masks), *dropout1);
    return add_dropped(h, feed_forward_branch(norm2->forward(h)), *dropout2);
  }
  const Tensor h = norm_of_add_dropped(x, self_attn->forward(x, masks), *dropout1, *norm1);
  return norm_of_add_dropped(h, feed_forward_branch(h), *dropout2, *norm2);
}

}  // namespace lockstep::nn
