// tests/optim/test_optimizer.cpp — the Optimizer base: state_dict layout, the
// load_state_dict round trip (identical continued trajectories) and its errors.
#include <doctest/doctest.h>

#include <functional>
#include <memory>

#include "optim/adam.h"
#include "optim/sgd.h"
#include "optim_test_util.h"

namespace ls = lockstep;
using optim_test::kP0;
using optim_test::make_param;
using optim_test::set_step_grad;
using optim_test::values;

namespace {

using MakeOpt = std::function<std::unique_ptr<ls::optim::Optimizer>(std::vector<ls::Tensor>)>;

// Trains a for 3 steps, saves (cloning the tensors, as a checkpoint file would),
// loads into a fresh optimizer over a copy of the parameters, and continues both
// for 3 more steps with the same gradients: the parameters must stay identical.
void check_round_trip(const MakeOpt& make) {
  ls::Tensor a0 = make_param(kP0), a1 = make_param({0.1, 0.2, -0.3, 0.4});
  auto opt = make({a0, a1});
  for (int t = 1; t <= 3; ++t) {
    set_step_grad(a0, t);
    if (t != 2) set_step_grad(a1, t);  // a1 skips step 2
    opt->step();
    opt->zero_grad();
  }
  ls::optim::OptimizerState saved;
  for (const auto& [key, value] : opt->state_dict()) saved[key] = value.clone();

  ls::Tensor b0 = make_param(values(a0)), b1 = make_param(values(a1));
  auto restored = make({b0, b1});
  restored->load_state_dict(saved);
  CHECK(restored->step_count(0) == 3);
  CHECK(restored->step_count(1) == 2);
  for (int t = 4; t <= 6; ++t) {
    for (const ls::Tensor& p : {a0, a1, b0, b1}) set_step_grad(p, t);
    opt->step();
    restored->step();
  }
  CHECK(values(a0) == values(b0));
  CHECK(values(a1) == values(b1));
}

}  // namespace

TEST_CASE("optimizer: state_dict round trip continues SGD and Adam trajectories identically") {
  check_round_trip([](std::vector<ls::Tensor> ps) {
    return std::make_unique<ls::optim::SGD>(
        ps, ls::optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01));
  });
  check_round_trip([](std::vector<ls::Tensor> ps) {
    return std::make_unique<ls::optim::Adam>(ps, ls::optim::AdamOptions(0.01).amsgrad(true));
  });
  check_round_trip([](std::vector<ls::Tensor> ps) {
    return std::make_unique<ls::optim::AdamW>(ps, ls::optim::AdamWOptions(0.01));
  });
}

TEST_CASE(
    "optimizer: state_dict holds hyper-parameters, the parameter count and per-parameter state") {
  ls::Tensor a = make_param(kP0), b = make_param(kP0);
  ls::optim::Adam adam({a, b}, ls::optim::AdamOptions(0.01).betas(0.8, 0.99));
  set_step_grad(a, 1);
  adam.step();
  adam.step();  // a's grad is still set: a second step
  ls::optim::OptimizerState sd = adam.state_dict();
  CHECK(sd.at("param_groups.lr").dtype() == ls::kFloat64);
  CHECK(sd.at("param_groups.lr").dim() == 0);
  CHECK(sd.at("param_groups.lr").item<double>() == 0.01);
  CHECK(sd.at("param_groups.beta1").item<double>() == 0.8);
  CHECK(sd.at("param_groups.beta2").item<double>() == 0.99);
  CHECK(sd.at("param_groups.amsgrad").item<double>() == 0.0);
  CHECK(sd.at("param_groups.num_params").item<int64_t>() == 2);
  CHECK(sd.at("state.0.step").item<int64_t>() == 2);
  CHECK(sd.at("state.0.exp_avg").sizes() == a.sizes());
  CHECK(sd.at("state.0.exp_avg_sq").sizes() == a.sizes());
  CHECK(sd.count("state.1.step") == 0);  // b was never stepped
  CHECK(sd.count("state.0.max_exp_avg_sq") == 0);
  // exp_avg after two steps of the same gradient g: 0.8*(0.2 g) + 0.2 g = 0.36 g.
  for (size_t i = 0; i < 3; ++i) {
    CHECK(values(sd.at("state.0.exp_avg"))[i] ==
          doctest::Approx(0.36 * optim_test::grad_value(1, i)).epsilon(1e-14));
  }
}

TEST_CASE("optimizer: load_state_dict restores hyper-parameters such as lr") {
  ls::Tensor a = make_param(kP0);
  ls::optim::SGD sgd({a}, ls::optim::SGDOptions(0.1).momentum(0.9));
  sgd.set_lr(0.025);
  ls::optim::OptimizerState sd = sgd.state_dict();
  ls::Tensor b = make_param(kP0);
  ls::optim::SGD other({b}, ls::optim::SGDOptions(0.5).momentum(0.9));
  other.load_state_dict(sd);
  CHECK(other.lr() == 0.025);
}

TEST_CASE(
    "optimizer: load_state_dict rejects mismatched state, naming the key, and changes nothing") {
  ls::Tensor a = make_param(kP0);
  ls::optim::SGD sgd({a}, ls::optim::SGDOptions(0.1).momentum(0.9));
  set_step_grad(a, 1);
  sgd.step();
  const ls::optim::OptimizerState good = sgd.state_dict();

  ls::Tensor b = make_param(kP0);
  ls::optim::SGD target({b}, ls::optim::SGDOptions(0.3).momentum(0.9));

  auto with = [&](const std::string& key, const ls::Tensor& value) {
    ls::optim::OptimizerState sd = good;
    sd[key] = value;
    return sd;
  };
  auto without = [&](const std::string& key) {
    ls::optim::OptimizerState sd = good;
    sd.erase(key);
    return sd;
  };
  CHECK_THROWS_WITH_AS(
      target.load_state_dict(with("state.0.momentum_buffer", ls::zeros({4}, ls::kFloat64))),
      doctest::Contains("'state.0.momentum_buffer' has shape [4] but parameter 0 has shape [3]"),
      ls::Error);
  CHECK_THROWS_WITH_AS(target.load_state_dict(without("state.0.momentum_buffer")),
                       doctest::Contains("missing key 'state.0.momentum_buffer'"), ls::Error);
  CHECK_THROWS_WITH_AS(target.load_state_dict(without("state.0.step")),
                       doctest::Contains("missing key 'state.0.step'"), ls::Error);
  CHECK_THROWS_WITH_AS(target.load_state_dict(without("param_groups.momentum")),
                       doctest::Contains("no key 'param_groups.momentum'"), ls::Error);
  CHECK_THROWS_WITH_AS(
      target.load_state_dict(with("state.5.momentum_buffer", ls::zeros({3}, ls::kFloat64))),
      doctest::Contains("'state.5.momentum_buffer' names parameter 5"), ls::Error);
  CHECK_THROWS_WITH_AS(
      target.load_state_dict(with("state.0.exp_avg", ls::zeros({3}, ls::kFloat64))),
      doctest::Contains("unexpected key 'state.0.exp_avg'"), ls::Error);
  CHECK_THROWS_WITH_AS(target.load_state_dict(with("weights", ls::zeros({3}))),
                       doctest::Contains("unexpected key 'weights'"), ls::Error);
  CHECK_THROWS_WITH_AS(
      target.load_state_dict(with("param_groups.num_params", ls::scalar_tensor(2, ls::kInt64))),
      doctest::Contains("saved for 2 parameters but this optimizer has 1"), ls::Error);
  // Turning momentum off in the loaded hyper-parameters makes the buffer unexpected.
  CHECK_THROWS_WITH_AS(
      target.load_state_dict(with("param_groups.momentum", ls::scalar_tensor(0.0, ls::kFloat64))),
      doctest::Contains("unexpected key 'state.0.momentum_buffer'"), ls::Error);
  // An SGD state dict does not fit Adam.
  ls::optim::Adam adam({b}, ls::optim::AdamOptions(0.01));
  CHECK_THROWS_WITH_AS(adam.load_state_dict(good), doctest::Contains("no key 'param_groups.beta1'"),
                       ls::Error);

  // Nothing was changed by the failed loads: target still has lr 0.3 and no state.
  CHECK(target.lr() == 0.3);
  CHECK(target.step_count(0) == 0);
  CHECK(target.state_dict().count("state.0.step") == 0);
}

TEST_CASE("optimizer: loaded buffers are private copies converted to the parameter's dtype") {
  ls::Tensor a = make_param(kP0, ls::kFloat32);
  ls::optim::SGD sgd({a}, ls::optim::SGDOptions(0.1).momentum(0.9));
  set_step_grad(a, 1);
  sgd.step();
  ls::optim::OptimizerState sd = sgd.state_dict();
  ls::Tensor as_double = sd.at("state.0.momentum_buffer").to(ls::kFloat64);
  sd["state.0.momentum_buffer"] = as_double;

  ls::Tensor b = make_param(kP0, ls::kFloat32);
  ls::optim::SGD other({b}, ls::optim::SGDOptions(0.1).momentum(0.9));
  other.load_state_dict(sd);
  ls::Tensor loaded = other.state_dict().at("state.0.momentum_buffer");
  CHECK(loaded.dtype() == ls::kFloat32);
  as_double.fill_(123.0);  // the optimizer holds its own copy
  CHECK(values(loaded) == values(sgd.state_dict().at("state.0.momentum_buffer")));
}

TEST_CASE("optimizer: step_subset over disjoint masks equals one step, and masked-out parameters do not move") {
  // Note [Stepping a subset]: what ZeRO's overlap with DDP relies on.
  auto a1 = make_param(kP0), b1 = make_param({1.0, 2.0}), a2 = make_param(kP0), b2 = make_param({1.0, 2.0});
  ls::optim::AdamW whole({a1, b1}, ls::optim::AdamWOptions(0.1));
  ls::optim::AdamW parts({a2, b2}, ls::optim::AdamWOptions(0.1));
  for (int t = 1; t <= 3; ++t) {
    for (const auto& p : {a1, b1, a2, b2}) set_step_grad(p, t);
    whole.step();
    parts.step_subset({false, true});
    CHECK(parts.step_count(0) == t - 1);  // a2 not stepped yet: its grad is still there
    parts.step_subset({true, false});
  }
  CHECK(values(a1) == values(a2));
  CHECK(values(b1) == values(b2));
  CHECK(parts.step_count(0) == 3);
  CHECK_THROWS_WITH_AS(parts.step_subset({true}), doctest::Contains("the mask has 1 entries"), ls::Error);
}

TEST_CASE("optimizer: set_step_chunks updates large parameters in pieces, bitwise equal to one pass, "
          "reporting every piece in order") {
  for (int kind = 0; kind < 2; ++kind) {
    CAPTURE(kind);
    auto make = [kind](std::vector<ls::Tensor> p) -> std::unique_ptr<ls::optim::Optimizer> {
      if (kind == 0) return std::make_unique<ls::optim::SGD>(std::move(p), ls::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
      return std::make_unique<ls::optim::AdamW>(std::move(p), ls::optim::AdamWOptions(0.01));
    };
    std::vector<double> big(1000), small = {0.3, -0.2};
    for (size_t i = 0; i < big.size(); ++i) big[i] = std::cos(0.37 * static_cast<double>(i));
    ls::Tensor a = make_param(big, ls::kFloat32), b = make_param(small, ls::kFloat32);
    ls::Tensor ra = make_param(big, ls::kFloat32), rb = make_param(small, ls::kFloat32);
    auto opt = make({a, b});
    auto ref = make({ra, rb});
    std::vector<std::vector<int64_t>> seen;  // (index, offset, length)
    opt->set_step_chunks(300, [&](size_t i, int64_t offset, int64_t length) {
      seen.push_back({static_cast<int64_t>(i), offset, length});
    });
    for (int t = 1; t <= 3; ++t) {
      for (const ls::Tensor& p : {a, b, ra, rb}) set_step_grad(p, t);
      opt->step();
      ref->step();
    }
    CHECK(values(a) == values(ra));
    CHECK(values(b) == values(rb));
    // 300 rounds down to 256: pieces of 256, 256, 256, 232; the small one whole.
    const std::vector<std::vector<int64_t>> per_step = {{0, 0, 256}, {0, 256, 256}, {0, 512, 256}, {0, 768, 232}, {1, 0, 2}};
    REQUIRE(seen.size() == 3 * per_step.size());
    for (size_t k = 0; k < seen.size(); ++k) CHECK(seen[k] == per_step[k % per_step.size()]);
    opt->set_step_chunks(0, nullptr);  // off again: no more calls
    for (const ls::Tensor& p : {a, b}) set_step_grad(p, 4);
    opt->step();
    CHECK(seen.size() == 3 * per_step.size());
  }
}
