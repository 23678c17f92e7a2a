// models/bert.h — BERT: token/position/type embeddings, a post-norm
// transformer encoder, and a masked-language-model head.
//
// Module and parameter names follow the reference model the benchmarks compare
// against (bench/torch/models.py): tok, pos, typ, ln, drop,
// enc.layers.<i>.{self_attn,linear1,linear2,norm1,norm2}, head.{0,1,2}, dec.
// BertConfig::base() gives BERT-base's shapes (12 layers, hidden 768, 12 heads,
// FFN 3072, vocab 30522, 512 positions, 2 token types); ::tiny() a small one
// for tests. forward(ids (B, T) int64) -> MLM logits (B, T, vocab).
// Read before: nn/transformer.h, nn/embedding.h. Read next: models/small_cnn.h.
#pragma once

#include <memory>

#include "nn/module_list.h"
#include "nn/nn.h"

namespace lockstep::models {

struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden = 768;
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t ffn = 3072;
  int64_t max_positions = 512;
  int64_t type_vocab = 2;
  double dropout = 0.1;
  double layer_norm_eps = 1e-12;

  static BertConfig base() { return {}; }
  static BertConfig tiny() {
    BertConfig c;
    c.vocab_size = 512;
    c.hidden = 32;
    c.layers = 2;
    c.heads = 2;
    c.ffn = 64;
    c.max_positions = 64;
    return c;
  }
};

// The encoder stack: `layers` TransformerEncoderLayers (named like nn.TransformerEncoder).
struct BertEncoder : nn::Module {
  explicit BertEncoder(const BertConfig& config);
  std::string type_name() const override { return "TransformerEncoder"; }
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask = Tensor());  // (B, T, H)
  std::shared_ptr<nn::ModuleList<nn::TransformerEncoderLayer>> layers;
};

struct Bert : nn::Module {
  explicit Bert(const BertConfig& config = BertConfig::base());
  std::string type_name() const override { return "Bert"; }
  // ids (B, T) int64 -> logits (B, T, vocab); key_padding_mask (B, T) bool, true = padding.
  Tensor forward(const Tensor& ids, const Tensor& key_padding_mask = Tensor());

  BertConfig config;
  std::shared_ptr<nn::Embedding> tok, pos, typ;
  std::shared_ptr<nn::LayerNorm> ln;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<BertEncoder> enc;
  std::shared_ptr<nn::Sequential> head;  // Linear(H, H), GELU, LayerNorm(H)
  std::shared_ptr<nn::Linear> dec;       // H -> vocab
};

}  // namespace lockstep::models
