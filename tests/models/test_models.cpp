// tests/models/test_models.cpp — the models' layouts and plumbing: ResNet50's and
// BERT-base's parameter/buffer names, shapes, order and counts equal PyTorch's (the
// listings tools/make_golden.py writes from torchvision.models.resnet50() and
// bench/torch/models.py's Bert()); ResNet18 and a tiny BERT run forward and
// backward to every parameter; BERT's key_padding_mask hides padded tokens.
// Values against PyTorch: tests/models/test_parity.cpp.
// Read before: models/resnet.h, models/bert.h, tests/support/golden.h.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/rng.h"
#include "models/models.h"
#include "tests/support/golden.h"
#include "tests/support/profiler_rows.h"

namespace ls = lockstep;
using ls::testing::ListedTensor;
using ls::testing::Listing;

namespace {

// The model's parameters then buffers, in the listing's form.
Listing listing_of(const ls::nn::Module& model) {
  Listing out;
  out.total_parameters = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    out.tensors.push_back({"param", name, p.sizes()});
    out.total_parameters += p.numel();
  }
  for (const auto& [name, b] : model.named_buffers()) out.tensors.push_back({"buffer", name, b.sizes()});
  return out;
}

std::string describe(const ListedTensor& t) {
  std::ostringstream os;
  os << t.kind << ' ' << t.name << " [";
  for (size_t i = 0; i < t.shape.size(); ++i) os << (i ? ", " : "") << t.shape[i];
  os << ']';
  return os.str();
}

// "" when equal, else the first difference.
std::string compare_listings(const Listing& ours, const Listing& torch) {
  const size_t n = std::min(ours.tensors.size(), torch.tensors.size());
  for (size_t i = 0; i < n; ++i) {
    if (!(ours.tensors[i] == torch.tensors[i])) {
      return "entry " + std::to_string(i) + ": lockstep has " + describe(ours.tensors[i]) +
             ", PyTorch has " + describe(torch.tensors[i]);
    }
  }
  if (ours.tensors.size() != torch.tensors.size()) {
    return "lockstep lists " + std::to_string(ours.tensors.size()) + " tensors, PyTorch " +
           std::to_string(torch.tensors.size());
  }
  return "";
}

// Every parameter got a finite, non-zero gradient.
void check_every_parameter_reached(const ls::nn::Module& model) {
  for (const auto& [name, p] : model.named_parameters()) {
    INFO("parameter ", name);
    REQUIRE(p.grad().defined());
    const double norm = p.grad().to(ls::kFloat64).pow(2.0).sum().sqrt().item<double>();
    CHECK(std::isfinite(norm));
    CHECK(norm > 0.0);
  }
}

ls::models::BertConfig tiny_config_without_dropout() {
  ls::models::BertConfig c = ls::models::BertConfig::tiny();
  c.dropout = 0.0;
  return c;
}

}  // namespace

TEST_CASE("resnet: resnet50's parameter and buffer names, shapes and count equal torchvision's") {
  const Listing torch = ls::testing::load_listing("resnet50_params.txt");
  const Listing ours = listing_of(*ls::models::resnet50());
  const std::string diff = compare_listings(ours, torch);
  CHECK_MESSAGE(diff.empty(), diff);
  CHECK(torch.total_parameters == 25557032);  // the listing is torchvision's resnet50
  CHECK(ours.total_parameters == torch.total_parameters);
}

TEST_CASE("bert: BERT-base's parameter names, shapes and count equal bench/torch/models.py's Bert()'s") {
  // 133M parameters (the MLM decoder is not tied to the token embedding): ~530 MB in f32.
  const Listing torch = ls::testing::load_listing("bert_base_params.txt");
  const Listing ours = listing_of(ls::models::Bert(ls::models::BertConfig::base()));
  const std::string diff = compare_listings(ours, torch);
  CHECK_MESSAGE(diff.empty(), diff);
  CHECK(ours.total_parameters == torch.total_parameters);
}

TEST_CASE("resnet: resnet18 maps (2, 3, 64, 64) to (2, 1000) and backward reaches every parameter") {
  ls::manual_seed(0);
  auto model = ls::models::resnet18();
  model->train();
  ls::profiler::reset();
  ls::profiler::enable();
  ls::Tensor logits = model->forward(ls::randn({2, 3, 64, 64}));
  ls::profiler::disable();
  REQUIRE(logits.sizes() == ls::IntList{2, 1000});
  // The stem's bn1, relu and maxpool as one op (models/resnet.cpp, stem_end).
  const auto entries = ls::profiler::entries();
  const auto* stem = ls::testing::find_entry(entries, "batch_norm_relu_max_pool2d");
  REQUIRE(stem != nullptr);
  CHECK(stem->calls == 1);
  CHECK(ls::testing::find_entry(entries, "max_pool2d") == nullptr);
  logits.pow(2.0).mean().backward();
  check_every_parameter_reached(*model);
  for (const auto& [name, b] : model->named_buffers()) {  // one training batch counted
    if (name.size() >= 19 && name.compare(name.size() - 19, 19, "num_batches_tracked") == 0) {
      CHECK(b.item<int64_t>() == 1);
    }
  }
}

TEST_CASE("bert: tiny BERT maps ids (B, T) to logits (B, T, vocab) and backward reaches every parameter") {
  ls::manual_seed(0);
  const ls::models::BertConfig config = ls::models::BertConfig::tiny();
  ls::models::Bert model(config);
  model.train();
  ls::Tensor ids = ls::randint(0, config.vocab_size, {3, 10});
  ls::Tensor logits = model.forward(ids);
  REQUIRE(logits.sizes() == ls::IntList{3, 10, config.vocab_size});
  logits.pow(2.0).mean().backward();
  check_every_parameter_reached(model);
}

TEST_CASE("bert: BERT's key_padding_mask hides padded tokens from the other positions") {
  ls::manual_seed(0);
  ls::models::Bert model(tiny_config_without_dropout());
  model.eval();
  ls::NoGradGuard no_grad;
  const int64_t B = 2, T = 8, kept = 5;  // positions >= kept are padding
  ls::Tensor ids = ls::randint(1, 512, {B, T});
  std::vector<uint8_t> mask_values(static_cast<size_t>(B * T));
  for (int64_t i = 0; i < B * T; ++i) mask_values[static_cast<size_t>(i)] = (i % T) >= kept;
  ls::Tensor mask = ls::tensor(mask_values, {B, T}).to(ls::kBool);

  // Changing only the padded tokens leaves the logits of the real tokens unchanged...
  ls::Tensor other = ids.clone();
  other.narrow(1, kept, T - kept).fill_(0.0);
  ls::Tensor a = model.forward(ids, mask).narrow(1, 0, kept);
  ls::Tensor b = model.forward(other, mask).narrow(1, 0, kept);
  CHECK(ls::allclose(a, b, 1e-5, 1e-6));
  // ...and without the mask they do change (the test above can fail).
  ls::Tensor c = model.forward(ids).narrow(1, 0, kept);
  ls::Tensor d = model.forward(other).narrow(1, 0, kept);
  CHECK_FALSE(ls::allclose(c, d, 1e-5, 1e-6));
  // An all-false mask is the same as no mask.
  ls::Tensor none = ls::zeros({B, T}, ls::TensorOptions(ls::kBool));
  CHECK(ls::allclose(model.forward(ids, none), model.forward(ids), 1e-5, 1e-6));
  // A mask of the wrong shape is refused with an error, not read out of bounds.
  CHECK_THROWS_AS(model.forward(ids, ls::zeros({B, T + 1}, ls::TensorOptions(ls::kBool))), ls::Error);
}
