// tests/optim/test_adam_bf16_copy.cpp — Note [bf16 copies written by the optimizer]
// (core/autocast.h) for Adam and AdamW: the fused step writes each parameter's kept
// bf16 copy in the pass that updates it, bit for bit the cast the next forward would
// make, and that forward casts only its input; the float32 update is the one a step
// without a kept copy makes (the reference: the same optimizer on a twin parameter
// that never ran under autocast).
// Read before: optim/adam.h, core/autocast.h, tests/optim/test_sgd_bf16_copy.cpp.
#include <doctest/doctest.h>

#include "core/autocast.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "core/nn_ops.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "optim/adam.h"

namespace ls = lockstep;
namespace nv = lockstep::native;

namespace {

int64_t casts_during_forward(const ls::Tensor& x, const ls::Tensor& w, ls::Tensor& y) {
  ls::profiler::reset();
  ls::profiler::enable();
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    y = ls::linear(x, w, ls::Tensor());
  }
  ls::profiler::disable();
  for (const auto& e : ls::profiler::entries()) {
    if (e.name == "autocast.cast") return e.calls;
  }
  return 0;
}

}  // namespace

TEST_CASE("AdamW writes the kept bf16 copy in its pass, and its float32 update is unchanged") {
  ls::manual_seed(7);
  const ls::Tensor x = ls::randn({8, 32});
  ls::Tensor w = ls::randn({16, 32}, ls::requires_grad());
  ls::Tensor twin = w.detach().clone().requires_grad_(true);  // never under autocast
  ls::optim::AdamW adamw({w}, ls::optim::AdamWOptions(0.05).weight_decay(0.01));
  ls::optim::AdamW reference({twin}, ls::optim::AdamWOptions(0.05).weight_decay(0.01));
  for (int step = 0; step < 3; ++step) {
    ls::Tensor y;
    // x every time; w only the first time, afterwards AdamW wrote its copy.
    CHECK(casts_during_forward(x, w, y) == (step == 0 ? 2 : 1));
    {
      ls::AutocastGuard amp(ls::kBFloat16);
      const ls::Tensor used = ls::autocast::cached_cast(w, ls::kBFloat16);
      CHECK(nv::equal(used, nv::to_dtype(w.detach(), ls::kBFloat16)));
    }
    adamw.zero_grad();
    y.to(ls::kFloat32).sum().backward();
    reference.zero_grad();
    twin.mutable_grad() = w.grad().clone();  // the same gradient for the reference step
    adamw.step();
    reference.step();
    CHECK(nv::equal(w.detach(), twin.detach()));
  }
}
