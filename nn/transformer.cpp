// nn/transformer.cpp — TransformerEncoderLayer's construction and forward.
// Read before: nn/transformer.h.
#include "nn/transformer.h"

namespace lockstep::nn {

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead,
                                                 int64_t dim_feedforward, double dropout_p,
                                                 const std::string& activation,
                                                 double layer_norm_eps)
    : activation(activation) {
  LS_CHECK(activation == "gelu" || activation == "relu", "TransformerEncoderLayer: activation "
           "must be \"gelu\" or \"relu\" but got \"", activation, "\"");
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(d_model, nhead, dropout_p));
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, dim_feedforward));
  dropout = register_module("dropout", std::make_shared<Dropout>(dropout_p));
  linear2 = register_module("linear2", std::make_shared<Linear>(dim_feedforward, d_model));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(d_model, layer_norm_eps));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(d_model, layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(dropout_p));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(dropout_p));
}

Tensor TransformerEncoderLayer::forward(const Tensor& x, const Tensor& mask) {
  LS_CHECK(x.defined() && x.dim() == 3, "TransformerEncoderLayer.forward: expected x (B, T, d_model) "
           "but got ", x.defined() ? x.shape_str() : "an undefined tensor");
  return forward(x, AttentionMasks::from_positional(mask, x.size(0), x.size(1),
                                                    "TransformerEncoderLayer.forward"));
}

Tensor TransformerEncoderLayer::forward(const Tensor& x, const AttentionMasks& masks) {
  Tensor h = norm1->forward(x + dropout1->forward(self_attn->forward(x, masks)));
  Tensor f = linear1->forward(h);  // (B, T, ffn)
  f = activation == "gelu" ? f.gelu() : f.relu();
  f = linear2->forward(dropout->forward(f));  // (B, T, d_model)
  return norm2->forward(h + dropout2->forward(f));
}

}  // namespace lockstep::nn
