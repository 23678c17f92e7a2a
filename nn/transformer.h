// nn/transformer.h — TransformerEncoderLayer: self-attention + feed-forward, as
// torch.nn.TransformerEncoderLayer, post-norm (BERT's) or pre-norm (norm_first):
//   post-norm: x = norm1(x + dropout1(self_attn(x, masks)))
//              x = norm2(x + dropout2(linear2(dropout(activation(linear1(x))))))
//   pre-norm:  x = x + dropout1(self_attn(norm1(x), masks))
//              x = x + dropout2(linear2(dropout(activation(linear1(norm2(x))))))
// Children in PyTorch's order and names: self_attn, linear1, dropout, linear2,
// norm1, norm2, dropout1, dropout2 — so parameter names match
// ("self_attn.in_proj_weight", "linear1.weight", "norm2.bias", ...).
//
// Two ways to build one:
//   TransformerEncoderLayer(TransformerEncoderLayerOptions(d_model, nhead)
//       .dim_feedforward(2048).dropout(0.1).activation("relu").norm_first(false)
//       .batch_first(false))      // PyTorch's (and libtorch's) defaults, shown
//   TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout = 0.1,
//       activation = "gelu", layer_norm_eps = 1e-5)   // BERT's shorthand: batch-first, gelu
// Input (T, B, d_model), or (B, T, d_model) with batch_first (and the shorthand).
// activation is "relu" or "gelu" (erf form).
// Read before: nn/attention.h, nn/layer_norm.h. Read next: nn/transformer_encoder.h, models/bert.h.
#pragma once

#include <memory>
#include <string>

#include "nn/attention.h"
#include "nn/dropout.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"

namespace lockstep::nn {

// libtorch's TransformerEncoderLayerOptions, plus PyTorch's norm_first and batch_first.
class TransformerEncoderLayerOptions {
 public:
  TransformerEncoderLayerOptions(int64_t d_model, int64_t nhead) : d_model_(d_model), nhead_(nhead) {}

  TransformerEncoderLayerOptions& dim_feedforward(int64_t v) { dim_feedforward_ = v; return *this; }
  TransformerEncoderLayerOptions& dropout(double v) { dropout_ = v; return *this; }
  TransformerEncoderLayerOptions& activation(std::string v) { activation_ = std::move(v); return *this; }
  TransformerEncoderLayerOptions& layer_norm_eps(double v) { layer_norm_eps_ = v; return *this; }
  TransformerEncoderLayerOptions& norm_first(bool v) { norm_first_ = v; return *this; }
  TransformerEncoderLayerOptions& batch_first(bool v) { batch_first_ = v; return *this; }

  int64_t d_model() const { return d_model_; }
  int64_t nhead() const { return nhead_; }
  int64_t dim_feedforward() const { return dim_feedforward_; }
  double dropout() const { return dropout_; }
  const std::string& activation() const { return activation_; }
  double layer_norm_eps() const { return layer_norm_eps_; }
  bool norm_first() const { return norm_first_; }
  bool batch_first() const { return batch_first_; }

 private:
  int64_t d_model_, nhead_;
  int64_t dim_feedforward_ = 2048;
  double dropout_ = 0.1;
  std::string activation_ = "relu";
  double layer_norm_eps_ = 1e-5;
  bool norm_first_ = false, batch_first_ = false;
};

struct TransformerEncoderLayer : Module {
  explicit TransformerEncoderLayer(const TransformerEncoderLayerOptions& options);
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward,
                          double dropout = 0.1, const std::string& activation = "gelu",
                          double layer_norm_eps = 1e-5);

  std::string type_name() const override { return "TransformerEncoderLayer"; }
  // x in the options' layout; the masks as MultiheadAttention's (Note [Attention
  // masks] in nn/attention.h: a positional mask is told by shape).
  Tensor forward(const Tensor& x, const Tensor& mask = Tensor());
  Tensor forward(const Tensor& x, const AttentionMasks& masks);
  // libtorch's three-argument form: src_mask (T, T) and src_key_padding_mask (B, T),
  // either undefined.
  Tensor forward(const Tensor& x, const Tensor& src_mask, const Tensor& src_key_padding_mask);
  // The layer on a batch-first x (B, T, d_model), whatever the options say
  // (TransformerEncoder changes the layout once for the whole stack).
  Tensor forward_batch_first(const Tensor& x, const AttentionMasks& masks);

  TransformerEncoderLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1;
  std::shared_ptr<Dropout> dropout;
  std::shared_ptr<Linear> linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Dropout> dropout1, dropout2;

 private:
  Tensor feed_forward(const Tensor& x);  // dropout2(linear2(dropout(activation(linear1(x)))))
  Tensor feed_forward_branch(const Tensor& x);  // the same without dropout2
};

// The masks of a (src_mask, src_key_padding_mask) pair (either undefined).
AttentionMasks masks_of(const Tensor& src_mask, const Tensor& src_key_padding_mask);
// Checks that src is 3-d, (B, T, E) or (T, B, E) as batch_first says; `op` names the caller.
void check_src(const Tensor& src, bool batch_first, const char* op);
// A positional mask sorted by its shape for src (Note [Attention masks] in nn/attention.h).
AttentionMasks positional_masks(const Tensor& src, const Tensor& mask, bool batch_first, const char* op);
// x (B, T, E) batch-first from x in the given layout (a view), and back.
inline Tensor to_batch_first(const Tensor& x, bool batch_first) { return batch_first ? x : x.transpose(0, 1); }

}  // namespace lockstep::nn
