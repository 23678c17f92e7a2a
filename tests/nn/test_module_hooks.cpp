// tests/nn/test_module_hooks.cpp — Note [Forward pre-hooks]: a forward pre-hook
// runs before the layer's forward reads its parameters (also where a fused path
// reads them without the layer's forward, the bf16 fused dropout paths included),
// once per forward, in registration order, until removed; an error it throws
// leaves the forward undone; the state-dict pre-hooks of a module and of its
// descendants run before state_dict(), load_state_dict() and to().
// Read before: nn/module.h.
#include <doctest/doctest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/factory.h"
#include "core/rng.h"
#include "nn/nn.h"

namespace ls = lockstep;

namespace {

// A user's module over two layers; it owns no parameter itself.
struct TwoLayers : ls::nn::Module {
  std::shared_ptr<ls::nn::Linear> fc1 = std::make_shared<ls::nn::Linear>(4, 3);
  std::shared_ptr<ls::nn::Linear> fc2 = std::make_shared<ls::nn::Linear>(3, 2);
  TwoLayers() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  ls::Tensor forward(const ls::Tensor& x) { return fc2->forward(fc1->forward(x).tanh()); }
};

}  // namespace

TEST_CASE("forward pre-hooks: run first in every forward, in order, see the module, until removed") {
  auto net = std::make_shared<TwoLayers>();
  std::vector<std::string> log;
  const auto h1 = net->fc1->register_forward_pre_hook([&](const ls::nn::Module& m) {
    CHECK(&m == net->fc1.get());
    log.push_back("fc1");
  });
  net->fc2->register_forward_pre_hook([&](const ls::nn::Module&) { log.push_back("fc2 a"); });
  net->fc2->register_forward_pre_hook([&](const ls::nn::Module&) { log.push_back("fc2 b"); });
  const ls::Tensor x = ls::randn({5, 4});
  (void)net->forward(x);
  CHECK(log == std::vector<std::string>{"fc1", "fc2 a", "fc2 b"});
  net->fc1->remove_hook(h1);
  net->fc1->remove_hook(h1);  // again: ignored
  log.clear();
  (void)net->forward(x);
  CHECK(log == std::vector<std::string>{"fc2 a", "fc2 b"});
  CHECK_THROWS_AS(net->register_forward_pre_hook(nullptr), ls::Error);
}

TEST_CASE("forward pre-hooks: an error thrown by one propagates and the layer's forward does not run") {
  auto fc = std::make_shared<ls::nn::Linear>(4, 3);
  fc->register_forward_pre_hook([](const ls::nn::Module&) { throw std::runtime_error("not landed yet"); });
  CHECK_THROWS_WITH(fc->forward(ls::randn({2, 4})), "not landed yet");
}

TEST_CASE("forward pre-hooks: every built-in layer that owns parameters runs them, and says so") {
  auto hooked = [](const std::shared_ptr<ls::nn::Module>& m, int& runs) {
    CHECK(m->runs_forward_pre_hooks());
    m->register_forward_pre_hook([&runs](const ls::nn::Module&) { ++runs; });
  };
  int linear = 0, conv = 0, bn = 0, ln = 0, gn = 0, emb = 0, mha = 0;
  auto fc = std::make_shared<ls::nn::Linear>(4, 3);
  auto c = std::make_shared<ls::nn::Conv2d>(ls::nn::Conv2dOptions(2, 3, 3));
  auto b = std::make_shared<ls::nn::BatchNorm2d>(3);
  auto l = std::make_shared<ls::nn::LayerNorm>(4);
  auto g = std::make_shared<ls::nn::GroupNorm>(1, 3);
  auto e = std::make_shared<ls::nn::Embedding>(10, 4);
  auto a = std::make_shared<ls::nn::MultiheadAttention>(4, 2);
  hooked(fc, linear);
  hooked(c, conv);
  hooked(b, bn);
  hooked(l, ln);
  hooked(g, gn);
  hooked(e, emb);
  hooked(a, mha);
  (void)fc->forward(ls::randn({2, 4}));
  const ls::Tensor y = b->forward(c->forward(ls::randn({1, 2, 5, 5})));
  (void)g->forward(y);
  (void)l->forward(ls::randn({2, 4}));
  (void)e->forward(ls::tensor(std::vector<int64_t>{1, 2}, {2}));
  (void)a->forward(ls::randn({1, 3, 4}));
  for (int runs : {linear, conv, bn, ln, gn, emb, mha}) CHECK(runs == 1);
  CHECK_FALSE(std::make_shared<TwoLayers>()->runs_forward_pre_hooks());  // a user's module: not known to
}

TEST_CASE("forward pre-hooks: a layer whose parameters a fused path reads runs its hooks there") {
  // linear1 + GELU in one node (Note [linear + GELU in one node]) reads linear1's parameters.
  auto layer = std::make_shared<ls::nn::TransformerEncoderLayer>(
      ls::nn::TransformerEncoderLayerOptions(4, 2).dim_feedforward(8).dropout(0.0).activation("gelu"));
  int runs = 0;
  layer->linear1->register_forward_pre_hook([&](const ls::nn::Module&) { ++runs; });
  (void)layer->forward(ls::randn({3, 2, 4}));
  CHECK(runs == 1);
}

TEST_CASE("forward pre-hooks: the bf16 fused dropout paths run the hooks of the layers whose parameters they read") {
  // Training under bf16 autocast: linear1 + GELU + dropout in one node, each residual's
  // dropout + add + LayerNorm in one pass (Note [linear + GELU + dropout in one node],
  // Note [dropout + residual add + LayerNorm in one pass]): linear1's, norm1's and
  // norm2's parameters are read without their forward.
  ls::manual_seed(71);
  ls::nn::TransformerEncoderLayer layer(32, 4, 64, /*dropout=*/0.2, "gelu");
  int linear1 = 0, norm1 = 0, norm2 = 0;
  layer.linear1->register_forward_pre_hook([&](const ls::nn::Module&) { ++linear1; });
  layer.norm1->register_forward_pre_hook([&](const ls::nn::Module&) { ++norm1; });
  layer.norm2->register_forward_pre_hook([&](const ls::nn::Module&) { ++norm2; });
  const ls::Tensor x = ls::randn({2, 12, 32});
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    (void)layer.forward(x);
  }
  CHECK(linear1 == 1);
  CHECK(norm1 == 1);
  CHECK(norm2 == 1);
}

TEST_CASE("state-dict pre-hooks: a module's and its descendants' run before state_dict, load_state_dict and to") {
  auto net = std::make_shared<TwoLayers>();
  int root = 0, child = 0;
  net->register_state_dict_pre_hook([&](const ls::nn::Module&) { ++root; });
  const auto h = net->fc2->register_state_dict_pre_hook([&](const ls::nn::Module& m) {
    CHECK(&m == net->fc2.get());
    ++child;
  });
  const ls::nn::StateDict state = net->state_dict();
  CHECK((root == 1 && child == 1));
  net->load_state_dict(state);
  CHECK((root == 2 && child == 2));
  net->to(ls::kFloat64);
  CHECK((root == 3 && child == 3));
  (void)net->fc2->state_dict();  // on the child alone: only its own
  CHECK((root == 3 && child == 4));
  net->fc2->remove_hook(h);
  (void)net->state_dict();
  CHECK((root == 4 && child == 4));
  (void)net->forward(ls::randn({1, 4}, ls::TensorOptions().dtype(ls::kFloat64)));  // not a forward pre-hook
  CHECK(root == 4);
}
