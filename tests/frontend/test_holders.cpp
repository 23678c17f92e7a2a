// tests/frontend/test_holders.cpp — what the libtorch spellings mean: module holders
// (LS_MODULE), named_parameters() as an ordered dict, tied parameters listed once
// (Note [Shared parameters]), ls::save / ls::load of optimizers and their errors.
// Read before: nn/module_holder.h, nn/ordered_dict.h, optim/serialize.h.
// Read next: tests/frontend/test_libtorch_idioms.cpp.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep.h"
#include "tests/support/errors.h"
#include "tests/support/temp_files.h"

namespace ls = lockstep;

namespace {

struct TwoLayerImpl : ls::nn::Module {
  TwoLayerImpl() : TwoLayerImpl(3) {}
  explicit TwoLayerImpl(int64_t n) {
    a = register_module("a", std::make_shared<ls::nn::Linear>(n, n));
    b = register_module("b", std::make_shared<ls::nn::Linear>(n, 1));
  }
  ls::Tensor forward(const ls::Tensor& x) { return b->forward(a->forward(x).relu()); }
  std::shared_ptr<ls::nn::Linear> a, b;
};
LS_MODULE(TwoLayer);

struct OuterImpl : ls::nn::Module {
  OuterImpl() {
    inner = register_module("inner", inner);  // a default-constructed holder member
  }
  ls::Tensor forward(const ls::Tensor& x) { return inner(x); }
  TwoLayer inner;
};
LS_MODULE(Outer);

// A language model's ends: the output projection reuses the embedding's weight.
struct TiedLMImpl : ls::nn::Module {
  TiedLMImpl(int64_t vocab, int64_t dim, bool tie) {
    encoder = register_module("encoder", std::make_shared<ls::nn::Embedding>(vocab, dim));
    decoder = register_module("decoder", std::make_shared<ls::nn::Linear>(dim, vocab));
    if (tie) decoder->weight = decoder->replace_parameter("weight", encoder->weight);
  }
  ls::Tensor forward(const ls::Tensor& ids) { return decoder->forward(encoder->forward(ids).tanh()); }
  std::shared_ptr<ls::nn::Embedding> encoder;
  std::shared_ptr<ls::nn::Linear> decoder;
};
LS_MODULE(TiedLM);

std::vector<std::string> keys_of(const ls::nn::NamedTensors& named) { return named.keys(); }

}  // namespace

TEST_CASE("holders: construction, copies share the module, empty holders say so") {
  TwoLayer net;  // a default-constructed TwoLayerImpl
  CHECK_FALSE(net.is_empty());
  TwoLayer copy = net;
  CHECK(copy.get() == net.get());
  {
    ls::NoGradGuard no_grad;
    copy->a->weight.zero_();
  }
  CHECK(net->a->weight.abs().sum().item<float>() == 0.0f);  // one module behind both

  TwoLayer sized(5);
  CHECK(sized->a->weight.sizes() == std::vector<int64_t>{5, 5});
  std::shared_ptr<ls::nn::Module> as_module = sized;  // converts to a module pointer
  CHECK(as_module.get() == sized.get());

  TwoLayer empty{nullptr};
  CHECK(empty.is_empty());
  CHECK_FALSE(static_cast<bool>(empty));
  std::string msg = ls::testing::error_of([&] { empty->parameters(); });
  CHECK_MESSAGE(msg.find("holder is empty") != std::string::npos, msg);
  empty = TwoLayer(std::make_shared<TwoLayerImpl>(2));
  CHECK(empty->parameters().size() == 4);
}

TEST_CASE("holders: register_module takes a holder member and returns it") {
  Outer outer;
  CHECK(keys_of(outer->named_parameters()) ==
        std::vector<std::string>{"inner.a.weight", "inner.a.bias", "inner.b.weight", "inner.b.bias"});
  CHECK(outer->named_children()[0].value().get() == outer->inner.get());
  ls::Tensor x = ls::randn({4, 3});
  CHECK(ls::allclose(outer(x), outer->inner->forward(x)));
}

TEST_CASE("ordered dict: items, lookup by name, the earlier vector-of-pairs spelling") {
  TwoLayer net(3);
  auto named = net->named_parameters();
  CHECK(named[0].key() == "a.weight");
  CHECK(named[0].first == "a.weight");  // still a std::pair
  CHECK(named["b.bias"].sizes() == std::vector<int64_t>{1});
  CHECK(named["b.bias"].is_same(net->b->bias));
  std::vector<std::string> names;
  for (const auto& [name, tensor] : named) names.push_back(name);
  CHECK(names == named.keys());
  CHECK(named.values().size() == 4);
  std::vector<std::pair<std::string, ls::Tensor>> as_vector = net->named_parameters();
  CHECK(as_vector.size() == 4);
  std::string msg = ls::testing::error_of([&] { named["c.weight"]; });
  CHECK_MESSAGE(msg.find("no key 'c.weight'") != std::string::npos, msg);
  CHECK_MESSAGE(msg.find("a.weight") != std::string::npos, msg);
}

TEST_CASE("tied parameters: listed once, one gradient that sums both uses, two state-dict names") {
  ls::manual_seed(7);
  TiedLM tied(6, 4, /*tie=*/true);
  CHECK(tied->decoder->weight.is_same(tied->encoder->weight));
  CHECK(keys_of(tied->named_parameters()) == std::vector<std::string>{"encoder.weight", "decoder.bias"});
  CHECK(tied->parameters().size() == 2);
  CHECK(keys_of(tied->named_parameters(true, /*remove_duplicate=*/false)).size() == 3);
  auto sd = tied->state_dict();
  CHECK(sd.size() == 3);  // PyTorch's state dict keeps both names
  CHECK(sd.count("decoder.weight") == 1);

  // The same numbers in an untied model: the tied gradient is the sum of the two.
  TiedLM untied(6, 4, /*tie=*/false);
  untied->load_state_dict(sd);
  ls::Tensor ids = ls::tensor(std::vector<int64_t>{0, 3, 5, 3}, {2, 2});
  ls::Tensor target = ls::tensor(std::vector<int64_t>{1, 2, 0, 4}, {4});
  auto loss_of = [&](TiedLM& m) {
    return ls::nn::functional::cross_entropy(m->forward(ids).reshape({4, 6}), target);
  };
  loss_of(tied).backward();
  loss_of(untied).backward();
  ls::Tensor expected = untied->encoder->weight.grad() + untied->decoder->weight.grad();
  CHECK(ls::allclose(tied->encoder->weight.grad(), expected, 1e-5, 1e-6));

  // An optimizer over parameters() steps the shared tensor once.
  ls::Tensor before = tied->encoder->weight.clone();
  ls::optim::SGD sgd(tied->parameters(), /*lr=*/0.5);
  sgd.step();
  CHECK(ls::allclose(tied->encoder->weight, before - expected * 0.5, 1e-5, 1e-6));
  CHECK(tied->decoder->weight.is_same(tied->encoder->weight));

  // DDP reduces it as one parameter (it would otherwise report one as unused).
  auto pg = std::make_shared<ls::distributed::ProcessGroupGloo>(std::make_shared<ls::distributed::HashStore>(), 0, 1);
  ls::distributed::DistributedDataParallel ddp(tied, pg);
  CHECK(ddp.parameters().size() == 2);
  tied->zero_grad();
  ls::nn::functional::cross_entropy(ddp(ids).reshape({4, 6}), target).backward();
  CHECK(tied->encoder->weight.grad().defined());
}

TEST_CASE("tied parameters: replace_parameter refuses a missing name and another shape") {
  TiedLM lm(6, 4, /*tie=*/false);
  std::string missing = ls::testing::error_of([&] { lm->decoder->replace_parameter("kernel", lm->encoder->weight); });
  CHECK_MESSAGE(missing.find("no parameter 'kernel'") != std::string::npos, missing);
  std::string shape = ls::testing::error_of([&] { lm->decoder->replace_parameter("bias", lm->encoder->weight); });
  CHECK_MESSAGE(shape.find("[6, 4]") != std::string::npos, shape);
  CHECK_MESSAGE(shape.find("must have the shape") != std::string::npos, shape);
}

TEST_CASE("ls::save / ls::load of optimizers: the state round-trips, a wrong file is named") {
  ls::manual_seed(8);
  ls::testing::TempDir dir("holders");
  TwoLayer net(3);
  ls::optim::SGD sgd(net->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
  net->forward(ls::randn({2, 3})).sum().backward();
  sgd.step();
  ls::save(sgd, dir.file("sgd.safetensors"));
  ls::save(net, dir.file("net.safetensors"));

  ls::optim::SGD again(net->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
  ls::load(again, dir.file("sgd.safetensors"));
  auto a = sgd.state_dict(), b = again.state_dict();
  CHECK(a.size() == b.size());
  for (const auto& [key, t] : a) CHECK_MESSAGE(ls::allclose(t, b.at(key)), key);

  ls::optim::Adam adam(net->parameters(), ls::optim::AdamOptions(1e-3));
  std::string kind = ls::testing::error_of([&] { ls::load(adam, dir.file("sgd.safetensors")); });
  CHECK_MESSAGE(kind.find("holds SGD state") != std::string::npos, kind);
  std::string not_opt = ls::testing::error_of([&] { ls::load(adam, dir.file("net.safetensors")); });
  CHECK_MESSAGE(not_opt.find("no optimizer state") != std::string::npos, not_opt);
  ls::Tensor t;
  std::string not_tensor = ls::testing::error_of([&] { ls::load(t, dir.file("net.safetensors")); });
  CHECK_MESSAGE(not_tensor.find("holding one tensor") != std::string::npos, not_tensor);
}
