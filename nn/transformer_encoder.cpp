// nn/transformer_encoder.cpp — TransformerEncoder's construction and forward.
// Read before: nn/transformer_encoder.h.
#include "nn/transformer_encoder.h"

#include "core/shape.h"

namespace lockstep::nn {

TransformerEncoder::TransformerEncoder(const TransformerEncoderOptions& o) : options(o) {
  LS_CHECK(o.num_layers() > 0, "TransformerEncoder: num_layers must be positive but got ", o.num_layers());
  layers = register_module("layers", std::make_shared<ModuleList<TransformerEncoderLayer>>());
  for (int64_t i = 0; i < o.num_layers(); ++i) {
    layers->push_back(std::make_shared<TransformerEncoderLayer>(o.encoder_layer()));
  }
  if (o.norm()) {
    LS_CHECK(o.norm()->normalized_shape == IntList{o.encoder_layer().d_model()}, "TransformerEncoder: "
             "norm must be a LayerNorm(d_model = ", o.encoder_layer().d_model(), ") but it normalises ",
             shape_str(o.norm()->normalized_shape));
    norm = register_module("norm", o.norm());
  }
}

namespace {
const TransformerEncoderLayerOptions& options_of(const std::shared_ptr<TransformerEncoderLayer>& layer) {
  LS_CHECK(layer != nullptr, "TransformerEncoder: the encoder layer is null");
  return layer->options;
}
}  // namespace

TransformerEncoder::TransformerEncoder(const std::shared_ptr<TransformerEncoderLayer>& layer,
                                       int64_t num_layers, std::shared_ptr<LayerNorm> norm)
    : TransformerEncoder(TransformerEncoderOptions(options_of(layer), num_layers).norm(std::move(norm))) {
  const StateDict state = layer->state_dict();
  for (const auto& copy : *layers) copy->load_state_dict(state);
}

namespace {
constexpr const char* kOp = "TransformerEncoder.forward";
}  // namespace

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask) {
  return forward(src, positional_masks(src, mask, options.encoder_layer().batch_first(), kOp));
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& src_mask,
                                   const Tensor& src_key_padding_mask) {
  return forward(src, masks_of(src_mask, src_key_padding_mask));
}

Tensor TransformerEncoder::forward(const Tensor& src, const AttentionMasks& masks) {
  const bool batch_first = options.encoder_layer().batch_first();
  check_src(src, batch_first, kOp);
  Tensor x = to_batch_first(src, batch_first);  // (B, T, d_model)
  for (const auto& layer : *layers) x = layer->forward_batch_first(x, masks);
  if (norm) x = norm->forward(x);
  return to_batch_first(x, batch_first);
}

}  // namespace lockstep::nn
