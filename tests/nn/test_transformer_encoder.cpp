// tests/nn/test_transformer_encoder.cpp — TransformerEncoderLayer's options (norm_first,
// batch_first, relu/gelu) and TransformerEncoder: names, copies of a layer, layouts,
// the three ways to pass masks, a gradcheck (float64) and the messages of misuse.
// Its values against PyTorch are in tests/nn/test_parity.cpp.
// Read before: nn/transformer_encoder.h, tests/support/gradcheck.h.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/rng.h"
#include "nn/transformer_encoder.h"
#include "tests/support/errors.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
namespace nn = lockstep::nn;
using ls::testing::contains;
using ls::testing::error_of;
using Inputs = std::vector<ls::Tensor>;

namespace {
ls::Tensor causal_mask(int64_t T) {  // (T, T) bool, true above the diagonal (the future)
  return ls::arange(T).reshape({1, T}).gt(ls::arange(T).reshape({T, 1}));
}
}  // namespace

TEST_CASE("transformer: TransformerEncoder names its children as PyTorch and copies a layer") {
  ls::manual_seed(21);
  auto layer = std::make_shared<nn::TransformerEncoderLayer>(
      nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16));
  CHECK(layer->options.activation() == "relu");  // PyTorch's defaults
  CHECK_FALSE(layer->options.batch_first());
  nn::TransformerEncoder enc(layer, 3, std::make_shared<nn::LayerNorm>(8));
  const auto named = enc.named_parameters();
  CHECK(named.front().first == "layers.0.self_attn.in_proj_weight");
  CHECK(named.back().first == "norm.bias");
  CHECK(named.size() == 3 * layer->named_parameters().size() + 2);
  CHECK(enc.layers->size() == 3);
  for (const auto& copy : *enc.layers) {  // every copy starts with the layer's weights, in its own storage
    CHECK(ls::equal(copy->linear1->weight, layer->linear1->weight));
    CHECK(copy->linear1->weight.data_ptr<float>() != layer->linear1->weight.data_ptr<float>());
  }
  nn::TransformerEncoder fresh(nn::TransformerEncoderOptions(layer->options, 2));
  CHECK(fresh.norm == nullptr);
  CHECK_FALSE(ls::equal(fresh.layers->operator[](0)->linear1->weight, fresh.layers->operator[](1)->linear1->weight));
}

TEST_CASE("transformer: time-major and batch_first layouts give the same numbers, masks three ways") {
  ls::manual_seed(22);
  const int64_t T = 5, B = 3, E = 8;
  auto options = nn::TransformerEncoderLayerOptions(E, 2).dim_feedforward(16).dropout(0.0).norm_first(true);
  nn::TransformerEncoder seq(nn::TransformerEncoderOptions(options, 2));
  nn::TransformerEncoder bf(nn::TransformerEncoderOptions(nn::TransformerEncoderLayerOptions(options).batch_first(true), 2));
  bf.load_state_dict(seq.state_dict());
  ls::Tensor x = ls::randn({T, B, E});
  const ls::Tensor y = seq.forward(x, causal_mask(T));
  CHECK(y.sizes() == ls::IntList{T, B, E});
  CHECK(ls::allclose(bf.forward(x.transpose(0, 1), causal_mask(T)), y.transpose(0, 1), 1e-5, 1e-6));
  CHECK(ls::allclose(seq.forward(x, nn::AttentionMasks().is_causal(true)), y, 1e-5, 1e-6));
  CHECK(ls::allclose(seq.forward(x, causal_mask(T), ls::Tensor()), y, 1e-5, 1e-6));
  CHECK_FALSE(ls::allclose(seq.forward(x), y, 1e-5, 1e-6));  // the mask matters
  // A key padding mask (B, T) in the three-argument form, and positionally.
  const ls::Tensor pad = ls::arange(T).reshape({1, T}).ge(4.0).expand({B, T}).contiguous();  // last key hidden
  CHECK(ls::allclose(seq.forward(x, ls::Tensor(), pad), seq.forward(x, pad), 1e-6, 1e-7));
  // The layer alone, time-major, equals the first layer of the stack.
  nn::TransformerEncoderLayer& first = *seq.layers->operator[](0);
  CHECK(ls::allclose(first.forward(x, causal_mask(T)),
                     first.forward_batch_first(x.transpose(0, 1), nn::AttentionMasks().is_causal(true)).transpose(0, 1),
                     1e-5, 1e-6));
}

TEST_CASE("transformer: norm_first differs from post-norm, post-norm rows have zero mean") {
  ls::manual_seed(23);
  auto options = nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0).batch_first(true);
  nn::TransformerEncoderLayer post(options), pre(nn::TransformerEncoderLayerOptions(options).norm_first(true));
  pre.load_state_dict(post.state_dict());
  ls::Tensor x = 3.0 * ls::randn({2, 4, 8}) + 1.0;
  const ls::Tensor a = post.forward(x), b = pre.forward(x);
  CHECK(a.mean({-1}).abs().max().item<double>() < 1e-5);
  CHECK(b.mean({-1}).abs().max().item<double>() > 1e-2);  // the residual stream is not normalised
}

TEST_CASE("transformer: gradcheck of a 2-layer pre-norm gelu TransformerEncoder (float64)") {
  ls::manual_seed(24);
  auto enc = std::make_shared<nn::TransformerEncoder>(
      nn::TransformerEncoderOptions(nn::TransformerEncoderLayerOptions(4, 2).dim_feedforward(6).dropout(0.0)
                                        .activation("gelu").norm_first(true), 2)
          .norm(std::make_shared<nn::LayerNorm>(4)));
  enc->to(ls::kFloat64);
  CHECK_GRADCHECK([&](const Inputs& v) { return enc->forward(v[0], nn::AttentionMasks().is_causal(true)); },
                  {ls::testing::randn64({3, 2, 4})});
}

TEST_CASE("transformer: misuse gets a message") {
  auto options = nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16);
  CHECK(contains(error_of([&] { nn::TransformerEncoderLayer(nn::TransformerEncoderLayerOptions(options).activation("swish")); }),
                 "activation must be \"gelu\" or \"relu\""));
  CHECK(contains(error_of([&] { nn::TransformerEncoder(nn::TransformerEncoderOptions(options, 0)); }),
                 "num_layers must be positive"));
  CHECK(contains(error_of([&] {
          nn::TransformerEncoder(nn::TransformerEncoderOptions(options, 1).norm(std::make_shared<nn::LayerNorm>(4)));
        }), "norm must be a LayerNorm(d_model = 8)"));
  CHECK(contains(error_of([] { nn::TransformerEncoder(nullptr, 2); }), "the encoder layer is null"));
  nn::TransformerEncoder enc(nn::TransformerEncoderOptions(options, 1));
  CHECK(contains(error_of([&] { enc.forward(ls::randn({4, 8})); }), "expected src (T, B, d_model)"));
  // B == T: a positional (4, 4) mask could be either kind (Note [Attention masks]).
  CHECK(contains(error_of([&] { enc.forward(ls::randn({4, 4, 8}), causal_mask(4)); }), "say which"));
}
