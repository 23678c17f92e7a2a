// tests/autograd/test_checkpoint.cpp — activation checkpointing (autograd/checkpoint.h):
// the same gradients as the plain function for inputs and parameters, one
// recorded node, hooks firing once per checkpointed use (Note [Checkpoint and
// gradient hooks]), callbacks of the nested backward running at the end of the
// outer one (Note [Reentrant backward]), and the errors.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "autograd/accumulate_grad.h"
#include "autograd/checkpoint.h"
#include "autograd/engine.h"
#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace ls = lockstep;

namespace {

// A two-layer block: (B, 4) -> (B, 4), with its own parameters.
struct Block {
  ls::Tensor w1, b1, w2;
  Block() {
    ls::manual_seed(7);
    w1 = ls::randn({4, 6}).requires_grad_();
    b1 = ls::randn({6}).requires_grad_();
    w2 = ls::randn({6, 4}).requires_grad_();
  }
  ls::Tensor operator()(const ls::Tensor& x) const { return (x.matmul(w1) + b1).tanh().matmul(w2).relu(); }
  std::vector<ls::Tensor> params() const { return {w1, b1, w2}; }
  ls::autograd::CheckpointFunction fn() const {
    return [this](const std::vector<ls::Tensor>& in) { return (*this)(in[0]); };
  }
};

std::vector<ls::Tensor> grads(const std::vector<ls::Tensor>& ts) {
  std::vector<ls::Tensor> out;
  for (const auto& t : ts) out.push_back(t.grad().clone());
  return out;
}

void zero(const std::vector<ls::Tensor>& ts) {
  for (auto t : ts) t.mutable_grad() = ls::Tensor();
}

bool close(const std::vector<ls::Tensor>& a, const std::vector<ls::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    auto va = a[i].to_vector<float>(), vb = b[i].to_vector<float>();
    if (va.size() != vb.size()) return false;
    for (size_t k = 0; k < va.size(); ++k) {
      if (std::abs(va[k] - vb[k]) > 1e-6f) return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("checkpoint: gradients of inputs and parameters equal the plain function's") {
  Block block;
  ls::manual_seed(1);
  ls::Tensor x = ls::randn({3, 4}).requires_grad_();
  ls::Tensor scale = ls::randn({3, 4});
  std::vector<ls::Tensor> all = block.params();
  all.push_back(x);

  ((block(x) * scale).sum()).backward();
  const auto plain = grads(all);
  zero(all);

  ls::Tensor out = ls::autograd::checkpoint(block.fn(), {x});
  REQUIRE(out.grad_fn() != nullptr);
  CHECK(out.grad_fn()->name() == "CheckpointBackward");
  // Only the checkpoint's input is recorded: no activation of the block is kept.
  REQUIRE(out.grad_fn()->next_edges().size() == 1);
  CHECK(out.grad_fn()->next_edges()[0].function->name() == "AccumulateGrad");
  CHECK(ls::equal(out, block(x).detach()));
  ((out * scale).sum()).backward();
  CHECK(close(plain, grads(all)));
}

TEST_CASE("checkpoint: a block checkpointed twice fires each parameter's hook twice and sums its gradient") {
  Block block;
  ls::manual_seed(2);
  ls::Tensor x = ls::randn({2, 4});  // no gradient needed for the data
  (block(block(x)).sum()).backward();
  const auto plain = grads(block.params());
  zero(block.params());

  std::vector<int> fired(3, 0);
  int callbacks = 0, hooks_before_callback = -1;
  std::vector<ls::autograd::HookHandle> handles;
  for (size_t i = 0; i < 3; ++i) {
    handles.push_back(block.params()[i].register_post_accumulate_grad_hook([&, i](ls::Tensor&) {
      if (fired[0] + fired[1] + fired[2] == 0) {
        // Queued from inside a checkpoint's nested backward: must run once, at the end of the outer one.
        ls::autograd::queue_callback([&] {
          ++callbacks;
          hooks_before_callback = fired[0] + fired[1] + fired[2];
        });
      }
      ++fired[i];
    }));
  }
  ls::Tensor h = ls::autograd::checkpoint(block.fn(), {x});
  h = ls::autograd::checkpoint(block.fn(), {h});
  (h.sum()).backward();
  CHECK(fired == std::vector<int>{2, 2, 2});
  CHECK(callbacks == 1);
  CHECK(hooks_before_callback == 6);
  CHECK(close(plain, grads(block.params())));
  for (auto& handle : handles) handle.remove();
}

TEST_CASE("checkpoint: without grad mode it is the plain function, errors are clear") {
  Block block;
  ls::Tensor x = ls::randn({2, 4});
  {
    ls::NoGradGuard no_grad;
    ls::Tensor out = ls::autograd::checkpoint(block.fn(), {x});
    CHECK(out.grad_fn() == nullptr);
    CHECK(ls::equal(out, block(x)));
  }
  ls::Tensor out = ls::autograd::checkpoint(block.fn(), {x});
  ls::Tensor loss = out.sum();
  loss.backward();
  CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("retain_graph"), ls::Error);

  // A function that changes between forward and backward is caught by shape.
  int calls = 0;
  ls::Tensor y = ls::autograd::checkpoint(
      [&](const std::vector<ls::Tensor>& in) { return ++calls == 1 ? block(in[0]) : block(in[0]).sum(); }, {x});
  CHECK_THROWS_WITH_AS(y.sum().backward(), doctest::Contains("same thing"), ls::Error);
  CHECK_THROWS_WITH_AS(ls::autograd::checkpoint(nullptr, {x}), doctest::Contains("empty"), ls::Error);
}
