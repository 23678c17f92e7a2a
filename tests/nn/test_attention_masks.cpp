// tests/nn/test_attention_masks.cpp — Note [Attention masks] in nn/attention.h:
// key padding (B, T) and attention (T, T) masks by name, is_causal, a positional
// mask told by its shape, and the ambiguous B == T case refused (it used to be
// taken as a padding mask, silently, when a (T, T) causal mask was meant).
#include <doctest/doctest.h>

#include <vector>

#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/rng.h"
#include "nn/attention.h"
#include "nn/transformer.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
namespace nn = lockstep::nn;

namespace {
ls::Tensor causal_bool(int64_t T) {  // (T, T), true above the diagonal = hidden
  return ls::arange(T).reshape({1, T}).gt(ls::arange(T).reshape({T, 1}));
}
}  // namespace

TEST_CASE("attention masks: a (T, T) mask positional when B == T is refused, not taken as padding") {
  ls::manual_seed(21);
  nn::MultiheadAttention mha(8, 2);
  ls::Tensor x = ls::randn({4, 4, 8});  // B == T == 4
  CHECK_THROWS_WITH_AS(mha.forward(x, causal_bool(4)),
                       doctest::Contains("AttentionMasks().attn_mask(mask)"), ls::Error);
  nn::TransformerEncoderLayer layer(8, 2, 16, 0.0);
  CHECK_THROWS_WITH_AS(layer.forward(x, causal_bool(4)), doctest::Contains("B = T = 4"), ls::Error);
  // Named, both meanings work and differ.
  ls::Tensor as_attn = mha.forward(x, nn::AttentionMasks().attn_mask(causal_bool(4)));
  ls::Tensor as_pad = mha.forward(x, nn::AttentionMasks().key_padding_mask(
                                         ls::zeros({4, 4}, ls::TensorOptions().dtype(ls::kBool))));
  CHECK(ls::allclose(as_pad, mha.forward(x), 1e-6, 1e-7));
  CHECK_FALSE(ls::allclose(as_attn, as_pad, 1e-4, 1e-5));
}

TEST_CASE("attention masks: is_causal hides the future, equal to a causal attn_mask, bool or float") {
  ls::manual_seed(22);
  nn::MultiheadAttention mha(8, 2);
  const int64_t B = 2, T = 5;
  ls::Tensor x = ls::randn({B, T, 8});
  ls::Tensor y = mha.forward(x, nn::AttentionMasks().is_causal(true));
  CHECK(ls::allclose(y, mha.forward(x, nn::AttentionMasks().attn_mask(causal_bool(T))), 1e-6, 1e-7));
  // Positional (T, T) with B != T is an attention mask.
  CHECK(ls::allclose(y, mha.forward(x, causal_bool(T)), 1e-6, 1e-7));
  ls::Tensor additive = ls::where(causal_bool(T), ls::full({T, T}, -1e9), ls::zeros({T, T}));
  CHECK(ls::allclose(y, mha.forward(x, nn::AttentionMasks().attn_mask(additive)), 1e-5, 1e-6));
  // Changing position t' moves no output at t < t'.
  ls::Tensor x2 = x.clone();
  {
    ls::NoGradGuard no_grad;
    x2.narrow(1, 3, 2).copy_(ls::randn({B, 2, 8}) * 10.0);
  }
  ls::Tensor y2 = mha.forward(x2, nn::AttentionMasks().is_causal(true));
  CHECK(ls::allclose(y.narrow(1, 0, 3), y2.narrow(1, 0, 3), 1e-5, 1e-6));
  CHECK_FALSE(ls::allclose(y.narrow(1, 3, 2), y2.narrow(1, 3, 2), 1e-3, 1e-3));
  // A per-head (B * H, T, T) mask: the same causal mask for every head is the same result.
  ls::Tensor per_head = causal_bool(T).unsqueeze(0).expand({B * 2, T, T}).contiguous();
  CHECK(ls::allclose(y, mha.forward(x, nn::AttentionMasks().attn_mask(per_head)), 1e-6, 1e-7));
}

TEST_CASE("attention masks: padding and causal together, bad combinations and shapes refused") {
  ls::manual_seed(23);
  nn::MultiheadAttention mha(8, 2);
  ls::Tensor x = ls::randn({2, 5, 8});
  ls::Tensor pad = ls::tensor(std::vector<int64_t>{0, 0, 0, 0, 1, 0, 0, 0, 0, 0}, {2, 5}).gt(0);
  ls::Tensor both = mha.forward(x, nn::AttentionMasks().key_padding_mask(pad).is_causal(true));
  CHECK(both.sizes() == ls::IntList{2, 5, 8});
  CHECK_FALSE(ls::allclose(both, mha.forward(x, nn::AttentionMasks().is_causal(true)), 1e-4, 1e-5));
  CHECK_THROWS_WITH_AS(mha.forward(x, nn::AttentionMasks().attn_mask(causal_bool(5)).is_causal(true)),
                       doctest::Contains("not both"), ls::Error);
  CHECK_THROWS_WITH_AS(mha.forward(x, causal_bool(4)), doctest::Contains("(T, T) = [5, 5]"), ls::Error);
  CHECK_THROWS_WITH_AS(mha.forward(x, nn::AttentionMasks().attn_mask(causal_bool(4))),
                       doctest::Contains("attn_mask must be"), ls::Error);
  CHECK_THROWS_WITH_AS(mha.forward(x, ls::zeros({2, 5, 5}).gt(0.0)), doctest::Contains("must be 2-d"), ls::Error);
}

TEST_CASE("attention masks: gradcheck of MultiheadAttention with is_causal") {
  ls::manual_seed(24);
  auto mha = std::make_shared<nn::MultiheadAttention>(4, 2);
  mha->to(ls::kFloat64);
  ls::Tensor x = ls::testing::randn64({1, 3, 4});
  CHECK_GRADCHECK([&](const std::vector<ls::Tensor>& v) {
    return mha->forward(v[0], nn::AttentionMasks().is_causal(true));
  }, {x});
}
