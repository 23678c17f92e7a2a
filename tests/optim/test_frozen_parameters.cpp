// tests/optim/test_frozen_parameters.cpp — optimizers given every parameter of a partly
// frozen model (requires_grad_(false) on some layers): construction succeeds, step() leaves
// the frozen parameters, and their state, untouched while the others train, and a layer
// unfrozen later starts from a fresh state (Note [Undefined gradients are skipped]).
#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <string>

#include "core/factory.h"
#include "core/rng.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "optim/adam.h"
#include "optim/sgd.h"

namespace ls = lockstep;

namespace {

// Two linear layers; tests freeze fc1.
struct TwoLayers : ls::nn::Module {
  std::shared_ptr<ls::nn::Linear> fc1, fc2;
  TwoLayers() {
    fc1 = register_module("fc1", std::make_shared<ls::nn::Linear>(4, 3));
    fc2 = register_module("fc2", std::make_shared<ls::nn::Linear>(3, 2));
  }
  ls::Tensor forward(const ls::Tensor& x) { return fc2->forward(fc1->forward(x).relu()); }
};

using MakeOptimizer = std::function<std::unique_ptr<ls::optim::Optimizer>(std::vector<ls::Tensor>)>;

// Trains a fresh TwoLayers with fc1 frozen for three steps and checks who moved.
void check_frozen_layer_is_skipped(const std::string& name, const MakeOptimizer& make) {
  CAPTURE(name);
  ls::manual_seed(0);
  auto net = std::make_shared<TwoLayers>();
  for (ls::Tensor& p : net->fc1->parameters()) p.requires_grad_(false);
  const ls::Tensor w1 = net->fc1->weight.clone(), w2 = net->fc2->weight.clone();
  std::unique_ptr<ls::optim::Optimizer> opt = make(net->parameters());  // no throw
  const ls::Tensor x = ls::randn({5, 4});
  for (int step = 0; step < 3; ++step) {
    opt->zero_grad();
    net->forward(x).pow(2.0).mean().backward();
    CHECK_FALSE(net->fc1->weight.grad().defined());  // backward never reached the frozen layer
    opt->step();
  }
  CHECK(ls::allclose(net->fc1->weight, w1));
  CHECK(opt->step_count(0) == 0);                   // fc1.weight: no state, no steps
  CHECK_FALSE(ls::allclose(net->fc2->weight, w2));  // the trainable layer moved
  CHECK(opt->step_count(2) == 3);                   // fc2.weight
}

}  // namespace

TEST_CASE("optim: SGD, Adam and AdamW take a partly frozen model's parameters, skip the frozen") {
  check_frozen_layer_is_skipped("SGD", [](std::vector<ls::Tensor> ps) {
    return std::make_unique<ls::optim::SGD>(std::move(ps),
                                            ls::optim::SGDOptions(0.1).momentum(0.9));
  });
  check_frozen_layer_is_skipped("Adam", [](std::vector<ls::Tensor> ps) {
    return std::make_unique<ls::optim::Adam>(std::move(ps), ls::optim::AdamOptions(1e-2));
  });
  check_frozen_layer_is_skipped("AdamW", [](std::vector<ls::Tensor> ps) {
    return std::make_unique<ls::optim::AdamW>(std::move(ps), ls::optim::AdamWOptions(1e-2));
  });
}

TEST_CASE("optim: a frozen parameter that still holds a gradient from before is not stepped") {
  ls::Tensor p = ls::tensor(std::vector<double>{1.0, -2.0}, {2},
                            ls::TensorOptions().dtype(ls::kFloat64).requires_grad(true));
  ls::optim::SGD sgd({p}, ls::optim::SGDOptions(0.5).momentum(0.9));
  p.set_grad(ls::ones({2}, ls::kFloat64));
  p.requires_grad_(false);  // frozen after its gradient was computed
  sgd.step();
  CHECK(p.to_vector<double>() == std::vector<double>{1.0, -2.0});
  CHECK(sgd.step_count(0) == 0);

  p.requires_grad_(true);  // unfrozen: the same gradient now takes a plain first step
  sgd.step();
  CHECK(p.to_vector<double>() == std::vector<double>{0.5, -2.5});
  CHECK(sgd.step_count(0) == 1);
}
