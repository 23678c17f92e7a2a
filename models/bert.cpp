// models/bert.cpp — building and running BERT.
// Read before: models/bert.h.
#include "models/bert.h"

#include "core/factory.h"

namespace lockstep::models {

BertEncoder::BertEncoder(const BertConfig& c) {
  layers = register_module("layers", std::make_shared<nn::ModuleList<nn::TransformerEncoderLayer>>());
  for (int64_t i = 0; i < c.layers; ++i) {
    layers->push_back(std::make_shared<nn::TransformerEncoderLayer>(c.hidden, c.heads, c.ffn,
                                                                     c.dropout, "gelu",
                                                                     c.layer_norm_eps));
  }
}

Tensor BertEncoder::forward(const Tensor& x, const Tensor& key_padding_mask) {
  Tensor h = x;
  const nn::AttentionMasks masks = nn::AttentionMasks().key_padding_mask(key_padding_mask);
  for (const auto& layer : *layers) h = layer->forward(h, masks);  // named: B may equal T
  return h;
}

Bert::Bert(const BertConfig& c) : config(c) {
  LS_CHECK(c.hidden % c.heads == 0, "Bert: hidden size ", c.hidden,
           " must be divisible by the number of heads ", c.heads);
  tok = register_module("tok", std::make_shared<nn::Embedding>(c.vocab_size, c.hidden));
  pos = register_module("pos", std::make_shared<nn::Embedding>(c.max_positions, c.hidden));
  typ = register_module("typ", std::make_shared<nn::Embedding>(c.type_vocab, c.hidden));
  ln = register_module("ln", std::make_shared<nn::LayerNorm>(c.hidden, c.layer_norm_eps));
  drop = register_module("drop", std::make_shared<nn::Dropout>(c.dropout));
  enc = register_module("enc", std::make_shared<BertEncoder>(c));
  head = register_module("head", std::make_shared<nn::Sequential>());
  head->push_back("0", std::make_shared<nn::Linear>(c.hidden, c.hidden));
  head->push_back("1", std::make_shared<nn::GELU>());
  head->push_back("2", std::make_shared<nn::LayerNorm>(c.hidden, c.layer_norm_eps));
  dec = register_module("dec", std::make_shared<nn::Linear>(c.hidden, c.vocab_size));
}

Tensor Bert::forward(const Tensor& ids, const Tensor& key_padding_mask) {
  LS_CHECK(ids.dim() == 2 && (ids.dtype() == kInt64 || ids.dtype() == kInt32),
           "Bert.forward: expected int64 token ids of shape (B, T), got ", ids.dtype(), " ",
           ids.shape_str());
  const int64_t T = ids.size(1);
  LS_CHECK(T <= config.max_positions, "Bert.forward: sequence length ", T,
           " exceeds max_positions ", config.max_positions);
  Tensor positions = arange(T).unsqueeze(0);                  // (1, T)
  Tensor types = zeros(ids.sizes(), TensorOptions(kInt64));   // (B, T): one segment
  Tensor x = tok->forward(ids) + pos->forward(positions) + typ->forward(types);  // (B, T, H)
  x = drop->forward(ln->forward(x));
  x = enc->forward(x, key_padding_mask);
  return dec->forward(head->forward(x));                      // (B, T, vocab)
}

}  // namespace lockstep::models
