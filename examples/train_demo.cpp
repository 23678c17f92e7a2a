// examples/train_demo.cpp — the README's main job (for now): a single-process
// training demo on the core and autograd layers alone.
//
// A two-layer MLP learns to tell the two arms of a noisy spiral apart. The
// model is plain tensors; the loss is cross-entropy written with log_softmax;
// the update is hand-written SGD under NoGradGuard. Later layers (nn, optim,
// distributed) replace each of these by a library piece: examples/train_ddp.cpp
// is the same task with nn, optim, data and DistributedDataParallel.
// Usage: build/bin/train_demo [--steps N] [--seed S] (--help: tools/cli.h).
#include <lockstep.h>

#include <cmath>
#include <cstdio>

#include "examples/spirals.h"
#include "tools/cli.h"

namespace ls = lockstep;

namespace {
int train(int steps, uint64_t seed) {
  ls::manual_seed(seed);
  ls::set_num_threads(1);
  auto [x, y] = examples::make_spirals(200);  // (400, 2), (400, 2)

  const int64_t hidden = 64;
  ls::Tensor w1 = (ls::randn({2, hidden}) * std::sqrt(2.0 / 2)).detach().requires_grad_();
  ls::Tensor b1 = ls::zeros({hidden}, ls::requires_grad());
  ls::Tensor w2 = (ls::randn({hidden, 2}) * std::sqrt(1.0 / hidden)).detach().requires_grad_();
  ls::Tensor b2 = ls::zeros({2}, ls::requires_grad());
  std::vector<ls::Tensor> params = {w1, b1, w2, b2};
  const double lr = 0.5;

  std::printf("train_demo: 2-layer MLP (2 -> %lld -> 2) on 400 spiral points, SGD lr %.2f\n",
              static_cast<long long>(hidden), lr);
  for (int step = 0; step <= steps; ++step) {
    ls::Tensor h = (ls::matmul(x, w1) + b1).relu();         // (400, hidden)
    ls::Tensor logits = ls::matmul(h, w2) + b2;             // (400, 2)
    ls::Tensor loss = -(logits.log_softmax(1) * y).sum() / static_cast<double>(x.size(0));
    for (auto& p : params) p.mutable_grad() = ls::Tensor();
    loss.backward();
    {
      ls::NoGradGuard no_grad;
      for (auto& p : params) p.sub_(p.grad(), lr);
    }
    if (step % 500 == 0) {
      double accuracy = logits.argmax(1).eq(y.argmax(1)).to(ls::kFloat32).mean().item<double>();
      std::printf("step %4d  loss %.4f  accuracy %.3f\n", step, loss.item<double>(), accuracy);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 3000;
  uint64_t seed = 0;
  ls::cli::Program program("train_demo", "A two-layer MLP learns two noisy spiral arms apart (core and autograd "
                                         "only, hand-written SGD).");
  program.integer("--steps", steps, "SGD steps", 0, 10000000);
  program.integer("--seed", seed, "seed of the data and the weights", 0);
  program.parse(argc, argv);
  return ls::cli::run("train_demo", [&] { return train(steps, seed); });
}
