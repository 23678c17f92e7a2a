// tests/nn/test_transformer_bf16_fused.cpp — a post-norm TransformerEncoderLayer
// training under bf16 autocast takes the fused dropout paths (Note [linear + GELU +
// dropout in one node], Note [dropout + residual add + LayerNorm in one pass] in
// autograd/functions/autocast_fused_dropout.h), and its step equals the same layer written out
// with the ops apart, bit for bit: output, every parameter's gradient, the input's
// gradient, and the order in which the parameters' gradients become ready (DDP's
// buckets follow it). CTest also runs these cases with LOCKSTEP_BF16_DROPOUT_ADD_NORM=0
// and LOCKSTEP_BF16_GELU_DROPOUT=0 (tests/CMakeLists.txt): the layer then takes the ops
// apart itself, and the graph shows it.
// Read before: nn/transformer.cpp.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "autograd/accumulate_grad.h"
#include "autograd/functions/autocast_fused_dropout.h"
#include "autograd/functions/autocast_ops.h"
#include "autograd/node.h"
#include "core/autocast.h"
#include "core/env_flag.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "core/rng.h"
#include "nn/transformer.h"

namespace ls = lockstep;
namespace nn = lockstep::nn;
namespace nv = lockstep::native;

namespace {

nn::TransformerEncoderLayer make_layer() {
  ls::manual_seed(71);
  return nn::TransformerEncoderLayer(32, 4, 64, /*dropout=*/0.2, "gelu");  // post-norm, batch_first
}

// The layer's forward in training under autocast, written out with the ops apart
// (dropout_add, layer_norm, linear + GELU, dropout): what the layer ran before the fusions.
ls::Tensor layer_by_hand(nn::TransformerEncoderLayer& l, const ls::Tensor& x) {
  const ls::Tensor a = l.self_attn->forward(x);  // (B, T, 32) bf16
  const ls::Tensor h = l.norm1->forward(ls::autograd::dropout_add(x, a, l.dropout1->p));
  const ls::Tensor f = ls::autograd::linear_gelu_autocast(h, l.linear1->weight, l.linear1->bias);
  const ls::Tensor y = l.linear2->forward(l.dropout->forward(f));
  return l.norm2->forward(ls::autograd::dropout_add(h, y, l.dropout2->p));
}

// The names of the nodes of out's graph, each node once.
std::multiset<std::string> node_names(const ls::Tensor& out) {
  std::multiset<std::string> names;
  std::set<const ls::autograd::Node*> seen;
  std::vector<std::shared_ptr<ls::autograd::Node>> todo{out.grad_fn()};
  while (!todo.empty()) {
    const std::shared_ptr<ls::autograd::Node> n = todo.back();
    todo.pop_back();
    if (!n || !seen.insert(n.get()).second) continue;
    names.insert(n->name());
    for (const auto& e : n->next_edges()) todo.push_back(e.function);
  }
  return names;
}

struct Step {
  ls::Tensor out, x;                // the output, and the input leaf (its gradient)
  std::vector<std::string> ready;   // parameter names in the order their gradients were accumulated
  std::multiset<std::string> nodes;
};

template <class Forward>
Step run_step(nn::TransformerEncoderLayer& l, Forward forward) {
  Step s;
  ls::manual_seed(72);
  s.x = ls::randn({2, 12, 32}).requires_grad_(true);
  const ls::Tensor g = ls::randn({2, 12, 32});
  std::vector<ls::autograd::HookHandle> hooks;
  for (const auto& [name, p] : l.named_parameters()) {
    const std::string n = name;
    hooks.push_back(
        p.register_post_accumulate_grad_hook([&s, n](ls::Tensor&) { s.ready.push_back(n); }));
  }
  ls::manual_seed(73);  // the dropouts' keys
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    s.out = forward(s.x);
  }
  s.nodes = node_names(s.out);
  s.out.backward(g);
  for (auto& h : hooks) h.remove();
  return s;
}

}  // namespace

TEST_CASE("transformer bf16 fused dropouts: the layer's step equals the ops apart bit for bit") {
  nn::TransformerEncoderLayer fused = make_layer(), apart = make_layer();
  const Step f = run_step(fused, [&](const ls::Tensor& x) { return fused.forward(x); });
  const Step a = run_step(apart, [&](const ls::Tensor& x) { return layer_by_hand(apart, x); });
  CHECK(f.out.dtype() == ls::kFloat32);
  CHECK(nv::equal(f.out.detach(), a.out.detach()));
  CHECK(nv::equal(f.x.grad(), a.x.grad()));
  const auto pf = fused.named_parameters(), pa = apart.named_parameters();
  REQUIRE(pf.size() == pa.size());
  for (size_t i = 0; i < pf.size(); ++i) {
    CAPTURE(pf[i].first);
    REQUIRE(pf[i].second.grad().defined());
    CHECK(nv::equal(pf[i].second.grad(), pa[i].second.grad()));
  }
  CHECK(f.ready.size() == pf.size());
  CHECK(f.ready == a.ready);  // the gradient-ready order DDP relies on
}

TEST_CASE("transformer bf16 fused dropouts: the graph has the fused nodes or with the switches 0 the ops apart") {
  const bool norm_on = ls::env_flag("LOCKSTEP_BF16_DROPOUT_ADD_NORM", true);
  const bool gelu_on = ls::env_flag("LOCKSTEP_BF16_GELU_DROPOUT", true);
  nn::TransformerEncoderLayer layer = make_layer();
  const Step s = run_step(layer, [&](const ls::Tensor& x) { return layer.forward(x); });
  CHECK(s.nodes.count("DropoutAddLayerNormBackward") == (norm_on ? 2u : 0u));
  CHECK(s.nodes.count("LayerNormBackward") == (norm_on ? 0u : 2u));
  CHECK(s.nodes.count("DropoutAddBackward") == (norm_on ? 0u : 2u));
  CHECK(s.nodes.count("LinearGeluDropoutAutocastBackward") == (gelu_on ? 1u : 0u));
  CHECK(s.nodes.count("LinearGeluAutocastBackward") == (gelu_on ? 0u : 1u));
  // Attention's dropout (dropout writing the bf16 copy), plus the feed-forward's when apart.
  CHECK(s.nodes.count("DropoutBackward") == (gelu_on ? 1u : 2u));
  // In evaluation nothing is dropped and nothing is fused with a dropout.
  layer.eval();
  const Step e = run_step(layer, [&](const ls::Tensor& x) { return layer.forward(x); });
  CHECK(e.nodes.count("DropoutAddLayerNormBackward") == 0u);
  CHECK(e.nodes.count("LinearGeluDropoutAutocastBackward") == 0u);
  CHECK(e.nodes.count("LayerNormBackward") == 2u);
}
