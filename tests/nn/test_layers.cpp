// tests/nn/test_layers.cpp — the layers: parameter names, shapes and counts as
// in PyTorch, default initialisation ranges, forward shapes and values,
// train/eval behaviour, Sequential, MultiheadAttention (against a loop
// reference, key_padding_mask, gradcheck) and TransformerEncoderLayer.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/rng.h"
#include "nn/nn.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using Names = std::vector<std::string>;

namespace {

Names names_of(const ls::nn::Module& m) {
  Names out;
  for (const auto& [name, t] : m.named_parameters()) out.push_back(name);
  return out;
}

int64_t count_parameters(const ls::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

double max_abs(const ls::Tensor& t) { return t.abs().max().item<double>(); }

}  // namespace

TEST_CASE("layers: Linear has PyTorch's parameters, init range and forward") {
  ls::manual_seed(0);
  ls::nn::Linear fc(784, 128);
  CHECK(fc.type_name() == "Linear");
  CHECK(names_of(fc) == Names{"weight", "bias"});
  CHECK(fc.weight.sizes() == ls::IntList{128, 784});
  CHECK(fc.bias.sizes() == ls::IntList{128});
  CHECK(count_parameters(fc) == 784 * 128 + 128);
  // See Note [Kaiming init of Linear and Conv]: both bounded by 1/sqrt(fan_in).
  const double bound = 1.0 / std::sqrt(784.0);
  CHECK(max_abs(fc.weight) <= bound);
  CHECK(max_abs(fc.weight) > 0.99 * bound);
  CHECK(max_abs(fc.bias) <= bound);
  CHECK(max_abs(fc.bias) > 0.8 * bound);

  ls::nn::Linear small(3, 2);
  ls::Tensor x = ls::randn({4, 3});
  CHECK(ls::allclose(small.forward(x), ls::matmul(x, small.weight.t()) + small.bias, 1e-5, 1e-6));
  ls::Tensor x3 = ls::randn({2, 5, 3});  // any leading dims
  CHECK(small.forward(x3).sizes() == ls::IntList{2, 5, 2});
  CHECK_THROWS_AS(small.forward(ls::randn({4, 4})), ls::Error);

  ls::nn::Linear no_bias(3, 2, /*bias=*/false);
  CHECK(names_of(no_bias) == Names{"weight"});
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(ls::allclose(no_bias.forward(x), ls::matmul(x, no_bias.weight.t()), 1e-5, 1e-6));
}

TEST_CASE("layers: init functions follow torch.nn.init's formulas") {
  ls::manual_seed(3);
  ls::Tensor w = ls::empty({64, 16, 3, 3});
  auto [fan_in, fan_out] = ls::nn::init::calculate_fan_in_and_fan_out(w);
  CHECK(fan_in == 16 * 9);
  CHECK(fan_out == 64 * 9);
  CHECK_THROWS_AS(ls::nn::init::calculate_fan_in_and_fan_out(ls::empty({5})), ls::Error);

  ls::nn::init::xavier_uniform_(w);
  const double xavier = std::sqrt(6.0 / (fan_in + fan_out));
  CHECK(max_abs(w) <= xavier);
  CHECK(max_abs(w) > 0.99 * xavier);
  ls::nn::init::kaiming_uniform_(w, 0.0, "fan_in", "relu");
  const double kaiming = std::sqrt(2.0) * std::sqrt(3.0 / fan_in);
  CHECK(max_abs(w) <= kaiming);
  CHECK(max_abs(w) > 0.99 * kaiming);
  ls::nn::init::normal_(w, 2.0, 0.5);
  CHECK(w.mean().item<double>() == doctest::Approx(2.0).epsilon(0.02));
  CHECK(((w - 2.0).pow(2.0).mean().sqrt()).item<double>() == doctest::Approx(0.5).epsilon(0.05));
  ls::nn::init::ones_(w);
  CHECK(w.sum().item<double>() == doctest::Approx(static_cast<double>(w.numel())));
  ls::nn::init::zeros_(w);
  CHECK(max_abs(w) == 0.0);
  CHECK_THROWS_AS(ls::nn::init::uniform_(ls::zeros({3}, ls::kInt64)), ls::Error);
  CHECK(ls::nn::init::calculate_gain("tanh") == doctest::Approx(5.0 / 3.0));

  // Same seed, same draws: replicas start identical.
  ls::manual_seed(9);
  ls::nn::Linear a(5, 4);
  ls::manual_seed(9);
  ls::nn::Linear b(5, 4);
  CHECK(ls::equal(a.weight, b.weight));
  CHECK(ls::equal(a.bias, b.bias));
}

TEST_CASE("layers: Conv2d options, parameter shapes, init and output shape") {
  ls::manual_seed(1);
  ls::nn::Conv2d conv(ls::nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false));
  CHECK(conv.type_name() == "Conv2d");
  CHECK(names_of(conv) == Names{"weight"});
  CHECK(conv.weight.sizes() == ls::IntList{64, 3, 7, 7});
  CHECK(count_parameters(conv) == 9408);  // torchvision resnet50.conv1
  CHECK(max_abs(conv.weight) <= 1.0 / std::sqrt(3.0 * 49));
  CHECK(conv.forward(ls::randn({2, 3, 32, 32})).sizes() == ls::IntList{2, 64, 16, 16});

  ls::nn::Conv2d grouped(ls::nn::Conv2dOptions(4, 8, {3, 1}).groups(2).padding({1, 0}));
  CHECK(names_of(grouped) == Names{"weight", "bias"});
  CHECK(grouped.weight.sizes() == ls::IntList{8, 2, 3, 1});
  CHECK(max_abs(grouped.bias) <= 1.0 / std::sqrt(6.0));
  CHECK(grouped.forward(ls::randn({1, 4, 5, 5})).sizes() == ls::IntList{1, 8, 5, 5});
  CHECK_THROWS_AS(grouped.forward(ls::randn({1, 3, 5, 5})), ls::Error);
  CHECK_THROWS_AS(ls::nn::Conv2d(ls::nn::Conv2dOptions(3, 8, 3).groups(2)), ls::Error);

  // A 1x1 convolution is a Linear over channels.
  ls::nn::Conv2d pointwise(ls::nn::Conv2dOptions(3, 2, 1));
  ls::Tensor x = ls::randn({1, 3, 1, 1});
  ls::Tensor expect = ls::matmul(x.reshape({1, 3}), pointwise.weight.reshape({2, 3}).t()) +
                      pointwise.bias;
  CHECK(ls::allclose(pointwise.forward(x).reshape({1, 2}), expect, 1e-5, 1e-6));
}

TEST_CASE("layers: BatchNorm2d uses batch statistics in training and running ones in eval") {
  ls::manual_seed(2);
  ls::nn::BatchNorm2d bn(3);
  CHECK(names_of(bn) == Names{"weight", "bias"});
  Names buffers;
  for (const auto& [name, t] : bn.named_buffers()) buffers.push_back(name);
  CHECK(buffers == Names{"running_mean", "running_var", "num_batches_tracked"});
  CHECK(bn.num_batches_tracked.dtype() == ls::kInt64);
  CHECK(bn.num_batches_tracked.dim() == 0);
  CHECK(bn.running_var.to_vector<float>() == std::vector<float>{1, 1, 1});

  ls::Tensor x = ls::randn({4, 3, 2, 2}) * 2.0 + 1.0;
  ls::Tensor mean = x.mean({0, 2, 3}, true);                       // (1, 3, 1, 1)
  ls::Tensor var = (x - mean).pow(2.0).mean({0, 2, 3}, true);      // biased
  ls::Tensor y = bn.forward(x);
  CHECK(ls::allclose(y, (x - mean) / (var + 1e-5).sqrt(), 1e-4, 1e-5));
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  const double n = 4 * 2 * 2;
  CHECK(ls::allclose(bn.running_mean, mean.reshape({3}) * 0.1, 1e-4, 1e-6));
  CHECK(ls::allclose(bn.running_var, var.reshape({3}) * (0.1 * n / (n - 1)) + 0.9, 1e-4, 1e-6));

  bn.eval();
  {
    ls::NoGradGuard no_grad;
    bn.weight.fill_(2.0);
    bn.bias.fill_(0.5);
  }
  ls::Tensor rm = bn.running_mean.clone(), rv = bn.running_var.clone();
  ls::Tensor expect = (x - rm.reshape({1, 3, 1, 1})) / (rv.reshape({1, 3, 1, 1}) + 1e-5).sqrt() * 2.0 + 0.5;
  CHECK(ls::allclose(bn.forward(x), expect, 1e-4, 1e-5));
  CHECK(ls::equal(bn.running_mean, rm));  // eval does not update
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  CHECK_THROWS_AS(bn.forward(ls::randn({4, 2, 2, 2})), ls::Error);
}

TEST_CASE("layers: LayerNorm normalises the trailing dims") {
  ls::manual_seed(4);
  ls::nn::LayerNorm ln(4);
  CHECK(names_of(ln) == Names{"weight", "bias"});
  CHECK(ln.weight.sizes() == ls::IntList{4});
  ls::Tensor x = ls::randn({2, 3, 4}) * 3.0 + 2.0;
  ls::Tensor y = ln.forward(x);
  CHECK(y.sizes() == ls::IntList{2, 3, 4});
  CHECK(max_abs(y.mean({-1})) < 1e-5);
  CHECK(ls::allclose(y.pow(2.0).mean({-1}), ls::ones({2, 3}), 1e-3, 1e-3));

  ls::nn::LayerNorm ln2({3, 4}, 1e-6);
  CHECK(ln2.weight.sizes() == ls::IntList{3, 4});
  CHECK(ln2.eps == 1e-6);
  CHECK(max_abs(ln2.forward(x).mean({1, 2})) < 1e-5);
  CHECK_THROWS_AS(ln2.forward(ls::randn({2, 4, 3})), ls::Error);
}

TEST_CASE("layers: Embedding looks up rows, N(0, 1) init, zero padding row") {
  ls::manual_seed(5);
  ls::nn::Embedding emb(100, 50, /*padding_idx=*/0);
  CHECK(names_of(emb) == Names{"weight"});
  CHECK(emb.weight.sizes() == ls::IntList{100, 50});
  CHECK(max_abs(emb.weight.select(0, 0)) == 0.0);
  ls::Tensor rest = emb.weight.narrow(0, 1, 99);
  CHECK(rest.mean().item<double>() == doctest::Approx(0.0).epsilon(0.05).scale(1.0));
  CHECK(rest.pow(2.0).mean().item<double>() == doctest::Approx(1.0).epsilon(0.1));

  ls::Tensor ids = ls::tensor(std::vector<int64_t>{3, 0, 7, 3, 99, 1}, {2, 3});
  ls::Tensor y = emb.forward(ids);
  CHECK(y.sizes() == ls::IntList{2, 3, 50});
  CHECK(ls::equal(y.select(0, 0).select(0, 0), emb.weight.select(0, 3)));
  CHECK(ls::equal(y.select(0, 1).select(0, 1), emb.weight.select(0, 99)));
  CHECK_THROWS_AS(ls::nn::Embedding(10, 4, 10), ls::Error);
}

TEST_CASE("layers: Dropout zeroes and rescales in training and is the identity in eval") {
  ls::manual_seed(6);
  ls::nn::Dropout drop(0.5);
  ls::Tensor x = ls::ones({2000});
  ls::Tensor y = drop.forward(x);
  std::vector<float> v = y.to_vector<float>();
  int zeros = 0;
  for (float e : v) {
    CHECK((e == 0.0f || e == 2.0f));
    zeros += e == 0.0f;
  }
  CHECK(zeros > 800);
  CHECK(zeros < 1200);
  drop.eval();
  CHECK(ls::equal(drop.forward(x), x));
  ls::nn::Dropout none(0.0);
  CHECK(ls::equal(none.forward(x), x));
  CHECK_THROWS_AS(ls::nn::Dropout(1.5), ls::Error);
}

TEST_CASE("layers: ReLU, GELU, Flatten, MaxPool2d and AdaptiveAvgPool2d") {
  ls::manual_seed(7);
  ls::Tensor x = ls::randn({2, 3, 4, 5});
  CHECK(ls::equal(ls::nn::ReLU().forward(x), x.relu()));
  CHECK(ls::equal(ls::nn::GELU().forward(x), x.gelu()));
  CHECK(ls::nn::Flatten().forward(x).sizes() == ls::IntList{2, 60});
  CHECK(ls::nn::Flatten(0).forward(x).sizes() == ls::IntList{120});
  CHECK(ls::nn::Flatten(1, 2).forward(x).sizes() == ls::IntList{2, 12, 5});

  ls::Tensor grid = ls::arange(16).to(ls::kFloat32).reshape({1, 1, 4, 4});
  ls::Tensor pooled = ls::nn::MaxPool2d(2).forward(grid);  // stride defaults to the kernel
  CHECK(pooled.sizes() == ls::IntList{1, 1, 2, 2});
  CHECK(pooled.to_vector<float>() == std::vector<float>{5, 7, 13, 15});
  CHECK(ls::nn::MaxPool2d(3, 2, 1).forward(ls::randn({2, 3, 8, 8})).sizes() ==
        ls::IntList{2, 3, 4, 4});
  CHECK_THROWS_AS(ls::nn::MaxPool2d(2, 2, 2), ls::Error);

  ls::Tensor avg = ls::nn::AdaptiveAvgPool2d(1).forward(x);
  CHECK(avg.sizes() == ls::IntList{2, 3, 1, 1});
  CHECK(ls::allclose(avg.reshape({2, 3}), x.mean({2, 3}), 1e-5, 1e-6));
  CHECK(ls::nn::AdaptiveAvgPool2d({2, 3}).forward(x).sizes() == ls::IntList{2, 3, 2, 3});
}

TEST_CASE("layers: Sequential names children and runs them in order") {
  ls::manual_seed(8);
  auto seq = std::make_shared<ls::nn::Sequential>();
  auto fc = seq->push_back("fc", std::make_shared<ls::nn::Linear>(4, 3));
  seq->push_back(std::make_shared<ls::nn::ReLU>());
  auto out = seq->push_back(std::make_shared<ls::nn::Linear>(3, 2));
  CHECK(seq->size() == 3);
  CHECK(names_of(*seq) == Names{"fc.weight", "fc.bias", "2.weight", "2.bias"});
  ls::Tensor x = ls::randn({5, 4});
  CHECK(ls::equal(seq->forward(x), out->forward(fc->forward(x).relu())));
  CHECK((*seq)[1]->type_name() == "ReLU");
  CHECK_THROWS_AS((*seq)[3], ls::Error);
  CHECK_THROWS_AS(seq->push_back("fc", std::make_shared<ls::nn::ReLU>()), ls::Error);

  // Nested, and built from a list.
  ls::nn::Sequential outer({seq, std::make_shared<ls::nn::GELU>()});
  CHECK(names_of(outer) == Names{"0.fc.weight", "0.fc.bias", "0.2.weight", "0.2.bias"});
  CHECK(ls::equal(outer.forward(x), seq->forward(x).gelu()));
  outer.eval();
  CHECK_FALSE(fc->is_training());
}

namespace {

// MultiheadAttention written out with loops in double, from the module's weights.
std::vector<double> mha_reference(ls::nn::MultiheadAttention& mha, const ls::Tensor& x,
                                  const std::vector<std::vector<bool>>& ignore) {
  const int64_t B = x.size(0), T = x.size(1), E = mha.embed_dim, H = mha.num_heads, D = E / H;
  auto xv = x.to_vector<double>();
  auto w = mha.in_proj_weight.to_vector<double>();
  auto b = mha.in_proj_bias.to_vector<double>();
  auto wo = mha.out_proj->weight.to_vector<double>();
  auto bo = mha.out_proj->bias.to_vector<double>();
  std::vector<double> out(B * T * E);
  for (int64_t bi = 0; bi < B; ++bi) {
    std::vector<double> qkv(T * 3 * E);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < 3 * E; ++j) {
        double s = b[j];
        for (int64_t e = 0; e < E; ++e) s += xv[(bi * T + t) * E + e] * w[j * E + e];
        qkv[t * 3 * E + j] = s;
      }
    std::vector<double> heads(T * E);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> p(T, 0.0);
        double mx = -1e300, z = 0;
        for (int64_t s = 0; s < T; ++s) {
          if (ignore[bi][s]) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += qkv[t * 3 * E + h * D + d] * qkv[s * 3 * E + E + h * D + d];
          p[s] = dot / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, p[s]);
        }
        for (int64_t s = 0; s < T; ++s) {
          p[s] = ignore[bi][s] ? 0.0 : std::exp(p[s] - mx);
          z += p[s];
        }
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t s = 0; s < T; ++s) acc += p[s] / z * qkv[s * 3 * E + 2 * E + h * D + d];
          heads[t * E + h * D + d] = acc;
        }
      }
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < E; ++i) {
        double s = bo[i];
        for (int64_t j = 0; j < E; ++j) s += heads[t * E + j] * wo[i * E + j];
        out[(bi * T + t) * E + i] = s;
      }
  }
  return out;
}

ls::Tensor bool_mask(const std::vector<std::vector<bool>>& ignore) {
  std::vector<uint8_t> v;
  for (const auto& row : ignore)
    for (bool b : row) v.push_back(b);
  return ls::tensor(v, {static_cast<int64_t>(ignore.size()), static_cast<int64_t>(ignore[0].size())})
      .ne(0.0);
}

}  // namespace

TEST_CASE("layers: MultiheadAttention parameters match PyTorch's names and shapes") {
  ls::manual_seed(10);
  ls::nn::MultiheadAttention mha(8, 2);
  CHECK(names_of(mha) ==
        Names{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
  CHECK(mha.in_proj_weight.sizes() == ls::IntList{24, 8});
  CHECK(mha.in_proj_bias.sizes() == ls::IntList{24});
  CHECK(mha.out_proj->weight.sizes() == ls::IntList{8, 8});
  CHECK(max_abs(mha.in_proj_bias) == 0.0);
  CHECK(max_abs(mha.out_proj->bias) == 0.0);
  CHECK(max_abs(mha.in_proj_weight) <= std::sqrt(6.0 / (8 + 24)));
  ls::nn::MultiheadAttention no_bias(8, 2, 0.0, /*bias=*/false);
  CHECK(names_of(no_bias) == Names{"in_proj_weight", "out_proj.weight"});
  CHECK_THROWS_AS(ls::nn::MultiheadAttention(8, 3), ls::Error);
}

TEST_CASE("layers: MultiheadAttention matches a loop reference, with and without a mask") {
  ls::manual_seed(11);
  ls::nn::MultiheadAttention mha(8, 2);
  {
    ls::NoGradGuard no_grad;  // non-zero biases, so they are exercised too
    mha.in_proj_bias.copy_(ls::randn({24}) * 0.5);
    mha.out_proj->bias.copy_(ls::randn({8}) * 0.5);
  }
  ls::Tensor x = ls::randn({2, 5, 8});
  std::vector<std::vector<bool>> none(2, std::vector<bool>(5, false));
  std::vector<std::vector<bool>> ignore = {{false, false, false, true, true},
                                           {true, false, false, false, false}};
  ls::Tensor y = mha.forward(x);
  CHECK(y.sizes() == ls::IntList{2, 5, 8});
  CHECK(ls::allclose(y, ls::tensor(mha_reference(mha, x, none), {2, 5, 8}).to(ls::kFloat32), 1e-4, 1e-5));
  ls::Tensor ym = mha.forward(x, bool_mask(ignore));
  CHECK(ls::allclose(ym, ls::tensor(mha_reference(mha, x, ignore), {2, 5, 8}).to(ls::kFloat32), 1e-4, 1e-5));
  CHECK_FALSE(ls::allclose(y, ym, 1e-4, 1e-5));
  CHECK_THROWS_AS(mha.forward(x, ls::zeros({2, 4}).ne(0.0)), ls::Error);
}

TEST_CASE("layers: MultiheadAttention ignores masked keys") {
  ls::manual_seed(12);
  ls::nn::MultiheadAttention mha(8, 2);
  std::vector<std::vector<bool>> ignore = {{false, false, false, true, true},
                                           {true, false, false, false, false}};
  ls::Tensor mask = bool_mask(ignore);
  ls::Tensor x = ls::randn({2, 5, 8});
  // Change only the masked positions: outputs at the kept positions must not move.
  ls::Tensor keep = mask.ne(1.0).reshape({2, 5, 1});
  ls::Tensor x2 = ls::where(keep, x, ls::randn({2, 5, 8}) * 10.0);
  ls::Tensor y1 = mha.forward(x, mask), y2 = mha.forward(x2, mask);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 5; ++t) {
      if (ignore[b][t]) continue;
      CAPTURE(b);
      CAPTURE(t);
      CHECK(ls::allclose(y1.select(0, b).select(0, t), y2.select(0, b).select(0, t), 1e-5, 1e-6));
    }
  // A float mask is added to the scores: a large negative value acts like true.
  ls::Tensor additive = ls::where(mask, ls::full({2, 5}, -1e9), ls::zeros({2, 5}));
  CHECK(ls::allclose(mha.forward(x, additive), y1, 1e-5, 1e-6));
}

TEST_CASE("layers: gradcheck of MultiheadAttention with a key padding mask") {
  ls::manual_seed(13);
  auto mha = std::make_shared<ls::nn::MultiheadAttention>(4, 2);
  mha->to(ls::kFloat64);
  ls::Tensor mask = bool_mask({{false, false, true}});
  ls::Tensor x = ls::testing::randn64({1, 3, 4});
  CHECK_GRADCHECK([&](const std::vector<ls::Tensor>& v) { return mha->forward(v[0], mask); }, {x});
}

TEST_CASE("layers: TransformerEncoderLayer names, shapes and gradient flow") {
  ls::manual_seed(14);
  ls::nn::TransformerEncoderLayer layer(8, 2, 16, /*dropout=*/0.1);
  CHECK(names_of(layer) ==
        Names{"self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
              "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
              "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"});
  CHECK(count_parameters(layer) == 216 + 72 + 144 + 136 + 32);
  CHECK(layer.linear1->weight.sizes() == ls::IntList{16, 8});

  ls::Tensor x = ls::randn({2, 5, 8});
  ls::Tensor mask = bool_mask({{false, false, false, false, true}, {false, false, true, true, true}});
  ls::Tensor y = layer.forward(x, mask);
  CHECK(y.sizes() == ls::IntList{2, 5, 8});
  (y * ls::randn({2, 5, 8})).sum().backward();
  for (const auto& [name, p] : layer.named_parameters()) {
    CAPTURE(name);
    REQUIRE(p.grad().defined());
    CHECK(max_abs(p.grad()) > 0.0);
  }

  // eval: dropout off, so the output is deterministic and post-norm (zero mean rows).
  layer.eval();
  CHECK_FALSE(layer.dropout1->is_training());
  ls::Tensor e1 = layer.forward(x, mask), e2 = layer.forward(x, mask);
  CHECK(ls::equal(e1, e2));
  CHECK(max_abs(e1.mean({-1})) < 1e-5);
  CHECK_THROWS_AS(ls::nn::TransformerEncoderLayer(8, 2, 16, 0.1, "swish"), ls::Error);
}
