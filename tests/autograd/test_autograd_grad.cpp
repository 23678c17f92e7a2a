// tests/autograd/test_autograd_grad.cpp — autograd::grad (autograd/grad.h): values,
// no .grad touched and no hook fired (Note [Capturing gradients]), retain_graph, and
// the errors a user can cause.
// Read before: autograd/grad.h. Read next: tests/autograd/test_double_backward.cpp.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "autograd/accumulate_grad.h"
#include "autograd/grad.h"
#include "core/factory.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "nn/activation.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using ls::Tensor;
using ls::autograd::grad;

TEST_CASE("autograd::grad: values as backward's, and no .grad changes, no hook fires") {
  ls::manual_seed(21);
  Tensor x = ls::randn({2, 3}, ls::requires_grad());
  Tensor w = ls::randn({3}, ls::requires_grad());
  int hook_calls = 0;
  auto handle = w.register_post_accumulate_grad_hook([&](Tensor&) { ++hook_calls; });
  Tensor y = (x * x * w).sum();
  std::vector<Tensor> g = grad({y}, {x});
  REQUIRE(g.size() == 1);
  CHECK(ls::allclose(g[0], 2.0 * x.detach() * w.detach()));
  CHECK_FALSE(g[0].requires_grad());
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(w.grad().defined());  // w is in the graph but was not asked for
  CHECK(hook_calls == 0);

  // Both inputs, against backward on a fresh graph.
  Tensor y2 = (x * x * w).sum();
  std::vector<Tensor> both = grad({y2}, {w, x}, {}, /*retain_graph=*/true);
  y2.backward();
  CHECK(hook_calls == 1);
  CHECK(ls::allclose(both[0], w.grad()));
  CHECK(ls::allclose(both[1], x.grad()));
  handle.remove();
}

TEST_CASE("autograd::grad: non-leaf inputs, several outputs with grad_outputs, an output itself") {
  ls::manual_seed(22);
  Tensor x = ls::randn({3}, ls::requires_grad());
  Tensor h = x * 2.0;
  Tensor y = (h * h).sum();
  CHECK(ls::allclose(grad({y}, {h}, {}, true)[0], 2.0 * h.detach()));
  CHECK(ls::allclose(grad({y}, {h, x}, {}, true)[1], 8.0 * x.detach()));  // through h
  CHECK_FALSE(x.grad().defined());

  Tensor w = ls::randn({3}, ls::requires_grad());
  Tensor v = ls::randn({3});
  Tensor y1 = x * w, y2 = x.sum();
  std::vector<Tensor> g = grad({y1, y2}, {x, w}, {v, Tensor()});  // y2 is 0-d: ones
  CHECK(ls::allclose(g[0], v * w.detach() + 1.0));
  CHECK(ls::allclose(g[1], v * x.detach()));

  Tensor z = (x * 3.0).sum();
  CHECK(ls::allclose(grad({z}, {z})[0], ls::ones({})));
}

TEST_CASE("autograd::grad: retain_graph defaults to create_graph, and a freed graph says so") {
  Tensor x = ls::randn({2}, ls::requires_grad());
  Tensor y = (x.exp() * x).sum();
  Tensor first = grad({y}, {x})[0];  // frees the saved tensors
  CHECK_THROWS_WITH_AS(grad({y}, {x}),
                       doctest::Contains("trying to backward through the graph a second time"),
                       ls::Error);
  CHECK_THROWS_WITH_AS(grad({y}, {x}), doctest::Contains("retain_graph=true"), ls::Error);

  Tensor y2 = (x.exp() * x).sum();
  Tensor a = grad({y2}, {x}, {}, /*retain_graph=*/true)[0];
  Tensor b = grad({y2}, {x})[0];
  CHECK(ls::allclose(a, first));
  CHECK(ls::allclose(b, first));

  Tensor y3 = (x.exp() * x).sum();  // create_graph keeps the graph unless told otherwise
  grad({y3}, {x}, {}, std::nullopt, /*create_graph=*/true);
  CHECK(ls::allclose(grad({y3}, {x})[0], first));
}

TEST_CASE("autograd::grad: the errors name the input or output and what to do") {
  Tensor x = ls::randn({2, 2}, ls::requires_grad());
  Tensor c = ls::randn({3});
  Tensor unused = ls::randn({3}, ls::requires_grad());
  Tensor y = (x * x).sum();
  CHECK_THROWS_WITH_AS(grad({y}, {x, c}, {}, true),
                       doctest::Contains("input 1 (shape [3]) does not require grad"), ls::Error);
  CHECK_THROWS_WITH_AS(grad({y}, {x, unused}, {}, true),
                       doctest::Contains("input 1 (shape [3]) was not used to compute the outputs"),
                       ls::Error);
  CHECK_THROWS_WITH_AS(grad({y}, {x, unused}, {}, true), doctest::Contains("allow_unused=true"),
                       ls::Error);
  std::vector<Tensor> g = grad({y}, {x, unused}, {}, true, false, /*allow_unused=*/true);
  CHECK(g[0].defined());
  CHECK_FALSE(g[1].defined());

  Tensor m = x * 2.0;  // (2, 2)
  CHECK_THROWS_WITH_AS(grad({m}, {x}),
                       doctest::Contains("output 0 (shape [2, 2]) is not a one-element tensor"),
                       ls::Error);
  CHECK_THROWS_WITH_AS(grad({m}, {x}, {ls::ones({2})}),
                       doctest::Contains("grad_outputs[0] has shape [2] but output 0 has shape [2, 2]"),
                       ls::Error);
  CHECK_THROWS_WITH_AS(grad({m, y}, {x}, {ls::ones({2, 2})}),
                       doctest::Contains("got 1 grad_outputs for 2 outputs"), ls::Error);
  CHECK_THROWS_WITH_AS(grad({c.sum()}, {x}), doctest::Contains("output 0 (shape []) does not require grad"),
                       ls::Error);
  CHECK(ls::allclose(grad({m}, {x}, {ls::ones({2, 2})})[0], ls::full({2, 2}, 2.0)));
}

TEST_CASE("autograd::grad: equals backward's .grad for a small MLP, in every parameter") {
  ls::manual_seed(23);
  Tensor x = ls::randn({4, 3});
  Tensor w1 = ls::randn({5, 3}, ls::requires_grad()), b1 = ls::randn({5}, ls::requires_grad());
  Tensor w2 = ls::randn({1, 5}, ls::requires_grad());
  auto loss_fn = [&] { return ls::linear(ls::nn::leaky_relu(ls::linear(x, w1, b1), 0.1), w2, {}).pow(2.0).mean(); };
  std::vector<Tensor> g = grad({loss_fn()}, {w1, b1, w2});
  loss_fn().backward();
  CHECK(ls::allclose(g[0], w1.grad()));
  CHECK(ls::allclose(g[1], b1.grad()));
  CHECK(ls::allclose(g[2], w2.grad()));
}
