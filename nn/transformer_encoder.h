// nn/transformer_encoder.h — TransformerEncoder: num_layers TransformerEncoderLayers
// and an optional final LayerNorm, as torch.nn.TransformerEncoder:
//
//   auto encoder = std::make_shared<ls::nn::TransformerEncoder>(
//       ls::nn::TransformerEncoderOptions(
//           ls::nn::TransformerEncoderLayerOptions(d_model, nhead).dim_feedforward(ffn), num_layers)
//       .norm(std::make_shared<ls::nn::LayerNorm>(d_model)));
//   Tensor y = encoder->forward(src, ls::nn::AttentionMasks().is_causal(true));
//
// Children "layers" (a ModuleList: "layers.0.self_attn.in_proj_weight", ...) and
// "norm" when given: PyTorch's names. The norm module given is registered as it
// is, so two encoders built from one options object share it. Built from a
// layer, TransformerEncoder(layer, num_layers) makes num_layers layers with the
// layer's options and copies its weights into each, as PyTorch's deep copies do
// (every layer starts equal); the layer itself is not registered. The layout
// (batch_first or not) is the layers'; the input is turned batch-first once for
// the whole stack.
// Read before: nn/transformer.h, nn/module_list.h. Read next: models/bert.h.
#pragma once

#include <memory>

#include "nn/module_list.h"
#include "nn/transformer.h"

namespace lockstep::nn {

class TransformerEncoderOptions {
 public:
  TransformerEncoderOptions(TransformerEncoderLayerOptions encoder_layer, int64_t num_layers)
      : encoder_layer_(std::move(encoder_layer)), num_layers_(num_layers) {}

  TransformerEncoderOptions& norm(std::shared_ptr<LayerNorm> v) { norm_ = std::move(v); return *this; }

  const TransformerEncoderLayerOptions& encoder_layer() const { return encoder_layer_; }
  int64_t num_layers() const { return num_layers_; }
  const std::shared_ptr<LayerNorm>& norm() const { return norm_; }

 private:
  TransformerEncoderLayerOptions encoder_layer_;
  int64_t num_layers_;
  std::shared_ptr<LayerNorm> norm_;
};

struct TransformerEncoder : Module {
  explicit TransformerEncoder(const TransformerEncoderOptions& options);
  // PyTorch's nn.TransformerEncoder(encoder_layer, num_layers, norm): copies of `layer`.
  TransformerEncoder(const std::shared_ptr<TransformerEncoderLayer>& layer, int64_t num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr);

  std::string type_name() const override { return "TransformerEncoder"; }
  // As TransformerEncoderLayer's forwards (Note [Attention masks] in nn/attention.h).
  Tensor forward(const Tensor& src, const Tensor& mask = Tensor());
  Tensor forward(const Tensor& src, const AttentionMasks& masks);
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask);

  TransformerEncoderOptions options;
  std::shared_ptr<ModuleList<TransformerEncoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;  // nullptr: no final norm
};

}  // namespace lockstep::nn
