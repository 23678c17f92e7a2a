// tests/autograd/test_engine_accumulate.cpp — Note [Gradients summed in place]
// (autograd/engine.cpp): when a gradient reaches a node along two edges, the
// engine adds into whichever of the two tensors nobody else can see, and copies
// when both are shared. Each case checks the gradient against its formula and
// that tensors the caller or another edge still holds are left unchanged.
// Read before: autograd/engine.h.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "autograd/engine.h"
#include "core/factory.h"
#include "core/profiler.h"
#include "core/tensor.h"

namespace ls = lockstep;

TEST_CASE("engine accumulate: fresh gradients from two branches are summed in place, correctly") {
  // u feeds exp and tanh: two fresh gradients meet at u's node.
  const std::vector<float> xs{0.1f, -0.7f, 1.3f, 2.0f};
  ls::Tensor x = ls::tensor(xs, {4}, ls::requires_grad());
  ls::Tensor u = x * 2.0;
  ls::profiler::reset();
  ls::profiler::enable();
  (u.exp() + u.tanh() * 3.0).sum().backward();
  ls::profiler::disable();
  bool summed = false;
  for (const auto& e : ls::profiler::entries()) summed |= e.name == "autograd.accumulate";
  CHECK(summed);  // the two gradients did meet
  const std::vector<float> g = x.grad().to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double t = std::tanh(2.0 * xs[i]);
    CHECK(g[i] == doctest::Approx(2.0 * (std::exp(2.0 * xs[i]) + 3.0 * (1.0 - t * t)))
                      .epsilon(1e-5));
  }
}

TEST_CASE("engine accumulate: one gradient tensor sent along two edges is not overwritten") {
  // y + y: AddBackward hands the same tensor to both edges; a view of it takes a third path.
  ls::Tensor a = ls::tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, ls::requires_grad());
  ls::Tensor y = a * 3.0;
  ls::Tensor z = y + y + y.reshape({3, 2}).reshape({2, 3}) * 2.0;  // d/da = 3 (1 + 1 + 2) = 12
  z.sum().backward();
  for (float v : a.grad().to_vector<float>()) CHECK(v == 12.0f);
}

TEST_CASE("engine accumulate: the caller's seed gradients are left as they were") {
  ls::Tensor a = ls::tensor(std::vector<float>{1, 2}, {2}, ls::requires_grad());
  ls::Tensor y = a * 5.0;
  ls::Tensor seed = ls::tensor(std::vector<float>{1, 10}, {2});
  // y twice as a root: both seeds reach y's node, and the caller holds them.
  ls::autograd::backward({y, y}, {seed, seed});
  CHECK(seed.to_vector<float>() == std::vector<float>{1, 10});
  CHECK(a.grad().to_vector<float>() == std::vector<float>{10, 100});
}
