// tests/optim/test_sgd_bf16_copy.cpp — Note [bf16 copies written by the optimizer]
// (core/autocast.h): SGD's fused step writes each parameter's kept bf16 copy in
// the pass that updates it, bit for bit the cast the next forward would make
// (both round to nearest even), and that forward casts nothing; a copy that a
// retained graph still holds is left alone.
// Read before: optim/sgd.h, core/autocast.h.
#include <doctest/doctest.h>

#include <string>

#include "core/autocast.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "core/nn_ops.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "optim/sgd.h"

namespace ls = lockstep;

namespace {

// Calls of the profiler row "autocast.cast" while `f` runs.
template <class F>
int64_t casts_during(F&& f) {
  ls::profiler::reset();
  ls::profiler::enable();
  f();
  ls::profiler::disable();
  for (const auto& e : ls::profiler::entries()) {
    if (e.name == "autocast.cast") return e.calls;
  }
  return 0;
}

}  // namespace

TEST_CASE("SGD writes the kept bf16 copy, the next forward under autocast casts only its input") {
  ls::manual_seed(5);
  ls::Tensor x = ls::randn({8, 32});
  ls::Tensor w = ls::randn({16, 32}, ls::requires_grad());
  ls::optim::SGD sgd({w}, ls::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 3; ++step) {
    ls::Tensor y;
    const int64_t casts = casts_during([&] {
      ls::AutocastGuard amp(ls::kBFloat16);
      y = ls::linear(x, w, ls::Tensor());
    });
    // x every time; w only the first time, afterwards the optimizer wrote its copy.
    CHECK(casts == (step == 0 ? 2 : 1));
    // The copy the forward read is, bit for bit, w rounded now.
    {
      ls::AutocastGuard amp(ls::kBFloat16);
      const ls::Tensor used = ls::autocast::cached_cast(w, ls::kBFloat16);
      CHECK(ls::native::equal(ls::native::to_dtype(used, ls::kFloat32),
                              ls::native::to_dtype(ls::native::to_dtype(w.detach(), ls::kBFloat16),
                                                   ls::kFloat32)));
    }
    sgd.zero_grad();
    y.to(ls::kFloat32).sum().backward();
    sgd.step();
  }
  CHECK(ls::autocast::kept_cast_count() >= 1);
}

TEST_CASE("SGD leaves a bf16 copy that a retained graph holds, and the graph's gradient with it") {
  ls::manual_seed(6);
  ls::Tensor x = ls::randn({4, 8}, ls::requires_grad());
  ls::Tensor w = ls::randn({6, 8}, ls::requires_grad());
  ls::optim::SGD sgd({w}, ls::optim::SGDOptions(0.5));
  ls::Tensor loss;
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    loss = ls::linear(x, w, ls::Tensor()).to(ls::kFloat32).sum();
  }
  loss.backward(ls::Tensor(), /*retain_graph=*/true);
  const ls::Tensor first = x.grad().clone();
  sgd.step();  // the graph still holds w's bf16 copy: SGD writes a fresh one
  x.mutable_grad() = ls::Tensor();  // the second backward starts from no gradient
  loss.backward(ls::Tensor(), /*retain_graph=*/true);
  CHECK(ls::native::equal(x.grad(), first));
}
