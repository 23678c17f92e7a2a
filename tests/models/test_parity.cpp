// tests/models/test_parity.cpp — whole models against PyTorch: a tiny ResNet
// (torchvision's ResNet with BasicBlock [1, 1, 1, 1], 10 classes), the Fashion-MNIST
// CNN and a tiny BERT of bench/torch/models.py (SmallCNN, and Bert.tiny(): BertConfig::tiny()'s
// sizes, dropout off), in train mode; goldens by tools/make_golden.py.
//
// The CNNs' weights are synthetic (Note [Synthetic weights] in tools/make_golden.py:
// too big to store), generated here by the same formula; their parameter gradients
// are compared on a strided sample plus each gradient's L2 norm. BERT's weights come
// from the file. Each model runs in float32 and float64 against PyTorch's float64
// results; tolerances as in Note [Parity tolerance] (tests/support/golden.h), except
// the ResNet, whose float32 budget is 10x wider: its gradients pass through eight
// train-mode BatchNorms, and PyTorch's own float32 run lands 5e-6 · scale from the
// float64 reference (the "torch_f32_error" in its file), where every layer alone
// stays within 5e-7.
// Read before: tests/nn/test_parity.cpp, tests/support/golden.h.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/factory.h"
#include "models/models.h"
#include "tests/support/golden.h"

namespace ls = lockstep;
using ls::testing::Golden;

namespace {

using Names = std::vector<std::string>;

Names names_of(const ls::nn::NamedTensors& named) {
  Names out;
  for (const auto& [name, t] : named) out.push_back(name);
  return out;
}

// ---- Note [Synthetic weights], the C++ half (must match tools/make_golden.py) ----
uint32_t fnv1a32(const std::string& s) {
  uint32_t h = 0x811C9DC5u;
  for (unsigned char c : s) h = (h ^ c) * 0x01000193u;
  return h;
}

uint32_t fmix32(uint32_t h) {  // murmur3's finaliser
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  return h ^ (h >> 16);
}

ls::Tensor synthetic(const std::string& name, const ls::IntList& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  double center = 0.0, scale = 0.1;
  if (shape.size() >= 2) {
    scale = 1.0 / std::sqrt(static_cast<double>(n / shape[0]));
  } else if (name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0) {
    center = 1.0;
  }
  const uint32_t seed = fnv1a32(name);
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    const double u = static_cast<double>(fmix32(static_cast<uint32_t>(j) ^ seed)) / 4294967296.0;
    values[static_cast<size_t>(j)] = static_cast<float>(center + scale * (2.0 * u - 1.0));
  }
  return ls::tensor(values, shape);
}

// Every stride-th element of the flattened tensor, stride = ceil(numel / 1024), as a
// float64 vector tensor (what make_golden.py stores as grad_sample.*).
ls::Tensor strided_sample(const ls::Tensor& t) {
  const std::vector<double> all = t.detach().to(ls::kFloat64).contiguous().to_vector<double>();
  const size_t stride = (all.size() + 1023) / 1024;
  std::vector<double> out;
  for (size_t i = 0; i < all.size(); i += stride) out.push_back(all[i]);
  return ls::tensor(out, {static_cast<int64_t>(out.size())});
}

// Checks the parameter and buffer names/order against the golden file's.
void check_names(const ls::nn::Module& model, const Golden& g) {
  CHECK(names_of(model.named_parameters()) == g.meta_list("param_order"));
  CHECK(names_of(model.named_buffers()) == g.meta_list("buffer_order"));
}

// A CNN with synthetic weights (ResNet, SmallCNN): forward in train mode, backward,
// compare output, input gradient, sampled parameter gradients and buffers.
void check_synthetic_model(const std::string& file, ls::nn::UnaryModule& model,
                           ls::ScalarType dtype, ls::testing::Tolerance tol) {
  INFO("golden case ", file, " in ", dtype == ls::kFloat64 ? "float64" : "float32");
  const Golden g = ls::testing::load_golden(file);
  check_names(model, g);

  ls::nn::StateDict state;
  for (const auto& [name, p] : model.named_parameters()) {
    state[name] = synthetic(name, p.sizes());
    // The generator here must reproduce Python's bit for bit before anything else counts.
    REQUIRE_MESSAGE(g.has("state_sample." + name), file, ": PyTorch has no parameter ", name);
    const ls::Tensor head = state[name].flatten().narrow(0, 0, g.at("state_sample." + name).numel());
    REQUIRE(ls::equal(head, g.at("state_sample." + name)));
  }
  for (const auto& [name, b] : model.named_buffers()) {  // PyTorch's initial values
    const bool var = name.size() >= 11 && name.compare(name.size() - 11, 11, "running_var") == 0;
    state[name] = var ? ls::ones(b.sizes()) : ls::zeros(b.sizes(), ls::TensorOptions(b.dtype()));
  }
  model.to(dtype);
  model.load_state_dict(state);
  model.train();
  model.zero_grad();

  ls::Tensor x = g.at("input.x").to(dtype).clone().requires_grad_(true);
  ls::Tensor out = model.forward(x);
  CHECK_GOLDEN(out, g.at("output"), tol, file + ": output");
  REQUIRE(out.sizes() == g.at("output").sizes());
  (out * g.at("grad_output").to(dtype)).sum().backward();
  CHECK_GOLDEN(x.grad(), g.at("grad.input.x"), tol, file + ": grad of the input");
  for (const auto& [name, p] : model.named_parameters()) {
    REQUIRE_MESSAGE(p.grad().defined(), file, ": backward did not reach ", name);
    CHECK_GOLDEN(strided_sample(p.grad()), g.at("grad_sample.param." + name), tol,
                 file + ": grad of " + name + " (strided sample)");
    ls::Tensor norm = p.grad().to(ls::kFloat64).pow(2.0).sum().sqrt();
    CHECK_GOLDEN(norm, g.at("grad_norm.param." + name), tol, file + ": L2 norm of the grad of " + name);
  }
  for (const auto& [name, b] : model.named_buffers()) {
    CHECK_GOLDEN(b, g.at("state_after." + name), tol, file + ": buffer " + name + " after forward");
  }
}

ls::models::BertConfig tiny_config_without_dropout() {
  ls::models::BertConfig c = ls::models::BertConfig::tiny();
  c.dropout = 0.0;
  return c;
}

}  // namespace

TEST_CASE("parity: tiny ResNet (BasicBlock [1, 1, 1, 1]) matches torchvision in train mode") {
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
    ls::models::ResNet model(/*bottleneck=*/false, {1, 1, 1, 1}, /*num_classes=*/10);
    ls::testing::Tolerance tol = ls::testing::tolerance_for(dtype);
    if (dtype == ls::kFloat32) tol.atol *= 10;  // see the file comment
    check_synthetic_model("model_resnet_tiny", model, dtype, tol);
  }
}

TEST_CASE("parity: SmallCNN matches bench/torch/models.py's SmallCNN") {
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
    ls::models::SmallCNN model;
    check_synthetic_model("model_small_cnn", model, dtype, ls::testing::tolerance_for(dtype));
  }
}

TEST_CASE("parity: tiny BERT matches bench/torch/models.py's Bert: logits and every gradient") {
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
    INFO("in ", dtype == ls::kFloat64 ? "float64" : "float32");
    const Golden g = ls::testing::load_golden("model_bert_tiny");
    const ls::testing::Tolerance tol = ls::testing::tolerance_for(dtype);
    ls::models::Bert model(tiny_config_without_dropout());
    check_names(model, g);
    model.to(dtype);
    REQUIRE_NOTHROW(model.load_state_dict(g.with_prefix("state.")));
    model.train();

    ls::Tensor logits = model.forward(g.at("input.ids"));  // (B, T, vocab)
    CHECK_GOLDEN(logits, g.at("output"), tol, "bert: logits");
    REQUIRE(logits.sizes() == g.at("output").sizes());
    (logits * g.at("grad_output").to(dtype)).sum().backward();
    for (const auto& [name, p] : model.named_parameters()) {
      REQUIRE_MESSAGE(g.has("grad.param." + name), "PyTorch's Bert has no parameter ", name);
      CHECK_GOLDEN(p.grad(), g.at("grad.param." + name), tol, "bert: grad of " + name);
    }
  }
}

TEST_CASE("parity: tiny BERT with a key_padding_mask matches PyTorch's src_key_padding_mask") {
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
    INFO("in ", dtype == ls::kFloat64 ? "float64" : "float32");
    const Golden weights = ls::testing::load_golden("model_bert_tiny");
    const Golden g = ls::testing::load_golden("model_bert_tiny_masked");
    ls::models::Bert model(tiny_config_without_dropout());
    model.to(dtype);
    model.load_state_dict(weights.with_prefix("state."));
    ls::Tensor logits = model.forward(g.at("input.ids"), g.at("input.key_padding_mask"));
    CHECK_GOLDEN(logits, g.at("output"), ls::testing::tolerance_for(dtype), "bert masked: logits");
  }
}
