// tests/autograd/test_engine.cpp — the tape and the Engine: accumulation, hooks,
// ordering, retain_graph, queue_callback, graph traversal, in-place safety.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "autograd/engine.h"
#include "autograd/graph_traversal.h"
#include "autograd/node.h"
#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/tensor.h"

namespace ls = lockstep;

TEST_CASE("engine: gradients of a small expression and accumulation across backward calls") {
  ls::Tensor w = ls::tensor(std::vector<float>{1, 2, 3}, {3}, ls::requires_grad());
  ls::Tensor x = ls::tensor(std::vector<float>{4, 5, 6}, {3});
  CHECK_FALSE(w.grad().defined());
  ls::Tensor loss = (w * x).sum();  // d/dw = x
  CHECK(loss.requires_grad());
  CHECK_FALSE(loss.is_leaf());
  CHECK(loss.grad_fn() != nullptr);
  loss.backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{4, 5, 6});
  CHECK_FALSE(x.grad().defined());
  (w * x).sum().backward();  // accumulates
  CHECK(w.grad().to_vector<float>() == std::vector<float>{8, 10, 12});
}

TEST_CASE("engine: a tensor used twice sums both contributions") {
  ls::Tensor a = ls::full({2}, 3.0, ls::requires_grad());
  ls::Tensor y = (a * a + a).sum();  // d/da = 2a + 1 = 7
  y.backward();
  CHECK(a.grad().to_vector<float>() == std::vector<float>{7, 7});
}

TEST_CASE("engine: a second backward through a freed graph says to pass retain_graph") {
  ls::Tensor a = ls::full({2}, 3.0, ls::requires_grad());
  ls::Tensor y = (a * a).sum();
  y.backward(ls::Tensor(), /*retain_graph=*/true);
  y.backward();  // allowed: the first kept the graph
  CHECK(a.grad().to_vector<float>() == std::vector<float>{12, 12});
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("retain_graph"), ls::Error);
}

TEST_CASE("engine: backward errors are clear") {
  ls::Tensor a = ls::ones({2});
  CHECK_THROWS_WITH_AS(a.sum().backward(), doctest::Contains("does not require grad"), ls::Error);
  ls::Tensor w = ls::ones({2}, ls::requires_grad());
  CHECK_THROWS_WITH_AS((w * 2.0).backward(), doctest::Contains("one element"), ls::Error);
  CHECK_THROWS_WITH_AS((w * 2.0).backward(ls::ones({3})), doctest::Contains("does not match"),
                       ls::Error);
}

TEST_CASE("engine: post-accumulate-grad hooks fire once per parameter per backward, after .grad holds the sum") {
  ls::Tensor w1 = ls::ones({2, 2}, ls::requires_grad());
  ls::Tensor w2 = ls::ones({2, 2}, ls::requires_grad());
  ls::Tensor unused = ls::ones({2}, ls::requires_grad());
  std::vector<std::string> fired;
  std::vector<float> seen_grad;
  auto h1 = w1.register_post_accumulate_grad_hook([&](ls::Tensor& p) {
    fired.push_back("w1");
    seen_grad = p.grad().to_vector<float>();
  });
  auto h2 = w2.register_post_accumulate_grad_hook([&](ls::Tensor&) { fired.push_back("w2"); });
  auto h3 = unused.register_post_accumulate_grad_hook([&](ls::Tensor&) { fired.push_back("unused"); });
  ls::Tensor x = ls::ones({3, 2});
  // w1 is used twice: its hook must see the sum of both contributions.
  ls::Tensor h = ls::matmul(x, w1) + ls::matmul(x, w1);  // (3, 2)
  ls::Tensor out = ls::matmul(h, w2).sum();
  out.backward();
  // w2's gradient is ready first (it is used last in forward).
  REQUIRE(fired.size() == 2);
  CHECK(fired[0] == "w2");
  CHECK(fired[1] == "w1");
  // d out / d w1 = 2 * x^T * (ones(3,2) w2^T) = 2 * 3 * 2 = 12 everywhere.
  CHECK(seen_grad == std::vector<float>{12, 12, 12, 12});
  CHECK_FALSE(unused.grad().defined());
  h1.remove();
  fired.clear();
  (ls::matmul(ls::matmul(x, w1), w2)).sum().backward();
  CHECK(fired == std::vector<std::string>{"w2"});
  h2.remove();
  h3.remove();
}

TEST_CASE("engine: hooks fire in the order gradients become ready (reverse of use)") {
  std::vector<ls::Tensor> params;
  for (int i = 0; i < 4; ++i) params.push_back(ls::full({2, 2}, 0.5, ls::requires_grad()));
  std::vector<int> order;
  std::vector<ls::autograd::HookHandle> handles;
  for (int i = 0; i < 4; ++i) {
    handles.push_back(params[i].register_post_accumulate_grad_hook([&, i](ls::Tensor&) {
      order.push_back(i);
    }));
  }
  ls::Tensor h = ls::ones({1, 2});
  for (int i = 0; i < 4; ++i) h = ls::matmul(h, params[i]).tanh();
  h.sum().backward();
  CHECK(order == std::vector<int>{3, 2, 1, 0});
}

TEST_CASE("engine: queue_callback runs once at the end of backward") {
  ls::Tensor w = ls::ones({2}, ls::requires_grad());
  int calls = 0;
  bool grad_ready_at_callback = false;
  auto handle = w.register_post_accumulate_grad_hook([&](ls::Tensor&) {
    ls::autograd::queue_callback([&] {
      ++calls;
      grad_ready_at_callback = w.grad().defined();
    });
  });
  CHECK_FALSE(ls::autograd::in_backward());
  (w * 3.0).sum().backward();
  CHECK(calls == 1);
  CHECK(grad_ready_at_callback);
  CHECK_THROWS_WITH_AS(ls::autograd::queue_callback([] {}), doctest::Contains("during a backward"),
                       ls::Error);
  handle.remove();
}

TEST_CASE("engine: sequence numbers grow in creation order, AccumulateGrad runs first") {
  ls::Tensor w = ls::ones({2}, ls::requires_grad());
  ls::Tensor a = w * 2.0;
  ls::Tensor b = a + 1.0;
  CHECK(b.grad_fn()->sequence_nr() > a.grad_fn()->sequence_nr());
  const auto& edges = a.grad_fn()->next_edges();
  REQUIRE(edges.size() >= 1);
  CHECK(edges[0].function->name() == "AccumulateGrad");
  CHECK(edges[0].function->sequence_nr() == ls::autograd::Node::kMaxSequenceNr);
}

TEST_CASE("graph traversal: lists exactly the leaves an output depends on") {
  ls::Tensor w1 = ls::ones({2}, ls::requires_grad());
  ls::Tensor w2 = ls::ones({2}, ls::requires_grad());
  ls::Tensor w3 = ls::ones({2}, ls::requires_grad());
  ls::Tensor out = (w1 * w2 + w1).sum();
  auto leaves = ls::autograd::reachable_accumulators({out});
  CHECK(leaves.size() == 2);
  auto has = [&](const ls::Tensor& t) {
    return std::any_of(leaves.begin(), leaves.end(),
                       [&](const auto& acc) { return acc->variable().is_same(t); });
  };
  CHECK(has(w1));
  CHECK(has(w2));
  CHECK_FALSE(has(w3));
  // The same AccumulateGrad is reused while a graph holds it.
  CHECK(ls::autograd::gradient_edge(w1).function == ls::autograd::gradient_edge(w1).function);
}

TEST_CASE("autograd: NoGradGuard records nothing, ops on non-grad inputs record nothing") {
  ls::Tensor w = ls::ones({2}, ls::requires_grad());
  {
    ls::NoGradGuard no_grad;
    ls::Tensor y = w * 2.0;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
  }
  CHECK(ls::GradMode::is_enabled());
  ls::Tensor z = ls::ones({2}) * 2.0;
  CHECK(z.grad_fn() == nullptr);
  CHECK((w * 2.0).grad_fn() != nullptr);
}

TEST_CASE("autograd: in-place ops on tensors autograd needs are refused or detected") {
  ls::Tensor w = ls::ones({2}, ls::requires_grad());
  CHECK_THROWS_WITH_AS(w.add_(1.0), doctest::Contains("NoGradGuard"), ls::Error);
  {
    ls::NoGradGuard no_grad;
    w.add_(1.0);  // allowed: how optimizers update parameters
  }
  CHECK(w.to_vector<float>() == std::vector<float>{2, 2});
  ls::Tensor y = w * 3.0;
  CHECK_THROWS_WITH_AS(y.mul_(2.0), doctest::Contains("in-place"), ls::Error);
  // A saved input modified in place is caught at backward time.
  ls::Tensor x = ls::ones({2});
  ls::Tensor prod = (w * x).sum();  // MulBackward saves x
  x.mul_(5.0);
  CHECK_THROWS_WITH_AS(prod.backward(), doctest::Contains("modified by an in-place operation"),
                       ls::Error);
}

TEST_CASE("autograd: detach shares data and drops history") {
  ls::Tensor w = ls::ones({2}, ls::requires_grad());
  ls::Tensor y = w * 2.0;
  ls::Tensor d = y.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.grad_fn() == nullptr);
  CHECK(d.raw_data() == y.raw_data());
  CHECK_THROWS_WITH_AS(y.requires_grad_(false), doctest::Contains("leaf"), ls::Error);
}
