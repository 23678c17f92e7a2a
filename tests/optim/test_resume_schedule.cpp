// tests/optim/test_resume_schedule.cpp — Note [Resuming a schedule] in
// optim/lr_scheduler.h: a run stopped after N steps and resumed from a
// checkpoint (the optimizer's, the scheduler's and the generator's state, written
// to a safetensors file and read back into new objects) continues exactly as the
// uninterrupted run: the same lr at every step, the same random numbers, the
// same parameters bit for bit. Before, a scheduler built after
// optimizer.load_state_dict() decayed from the already decayed lr.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/rng.h"
#include "core/rng_state.h"
#include "nn/serialize.h"
#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "optim/sgd.h"
#include "tests/support/temp_files.h"

namespace ls = lockstep;
namespace lo = lockstep::optim;

namespace {

using MakeScheduler = std::function<std::unique_ptr<lo::LRScheduler>(lo::Optimizer&)>;

struct Trace {
  std::vector<double> lrs;         // the lr each step ran with
  std::vector<float> draws;        // the first random number of each step
  std::vector<float> final_param;  // after the last step
};

// One training step: a random input (the generator's stream), a loss, backward, step, schedule.
void train_step(ls::Tensor& p, lo::Optimizer& opt, lo::LRScheduler& sched, Trace& trace) {
  ls::Tensor x = ls::randn({4});  // (4)
  trace.draws.push_back(x.to_vector<float>()[0]);
  trace.lrs.push_back(opt.lr());
  ls::Tensor loss = ((p * x).sum() - 1.0).pow(2.0);
  opt.zero_grad();
  loss.backward();
  opt.step();
  sched.step();
}

ls::Tensor fresh_param() {
  return ls::tensor(std::vector<float>{0.5f, -1.0f, 2.0f, 0.25f}, {4}, ls::requires_grad());
}

template <class Opt, class Options>
Trace uninterrupted(const Options& options, const MakeScheduler& make, int steps) {
  ls::manual_seed(7);
  ls::Tensor p = fresh_param();
  Opt opt({p}, options);
  auto sched = make(opt);
  Trace trace;
  for (int i = 0; i < steps; ++i) train_step(p, opt, *sched, trace);
  trace.final_param = p.to_vector<float>();
  return trace;
}

template <class Opt, class Options>
Trace resumed(const Options& options, const MakeScheduler& make, int stop_at, int steps) {
  ls::testing::TempDir dir("lockstep_test_resume_schedule");
  Trace trace;
  {  // the first run, stopped after stop_at steps and checkpointed
    ls::manual_seed(7);
    ls::Tensor p = fresh_param();
    Opt opt({p}, options);
    auto sched = make(opt);
    for (int i = 0; i < stop_at; ++i) train_step(p, opt, *sched, trace);
    std::map<std::string, ls::Tensor> ckpt;
    for (auto& [k, v] : opt.state_dict()) ckpt["optimizer." + k] = v;
    for (auto& [k, v] : sched->state_dict()) ckpt["scheduler." + k] = v;
    ckpt["rng"] = ls::get_rng_state();
    ckpt["param"] = p.detach();
    ls::nn::save_tensors(ckpt, dir.file("ckpt.safetensors"));
  }
  ls::manual_seed(12345);  // a new process would start from its own seed
  ls::randn({100});
  {  // the second run: new objects, built in the usual order, then loaded
    const auto ckpt = ls::nn::load_tensors(dir.file("ckpt.safetensors"));
    ls::Tensor p = fresh_param();
    {
      ls::NoGradGuard no_grad;
      p.copy_(ckpt.at("param"));
    }
    Opt opt({p}, options);
    lo::OptimizerState o, s;
    for (auto& [k, v] : ckpt) {
      if (k.rfind("optimizer.", 0) == 0) o[k.substr(10)] = v;
      if (k.rfind("scheduler.", 0) == 0) s[k.substr(10)] = v;
    }
    opt.load_state_dict(o);
    auto sched = make(opt);  // built after the optimizer's state was loaded
    CHECK(sched->base_lr() == doctest::Approx(options.lr()));  // the initial lr, not the decayed one
    sched->load_state_dict(s);
    ls::set_rng_state(ckpt.at("rng"));
    for (int i = stop_at; i < steps; ++i) train_step(p, opt, *sched, trace);
    trace.final_param = p.to_vector<float>();
  }
  return trace;
}

void check_same(const Trace& a, const Trace& b) {
  REQUIRE(a.lrs.size() == b.lrs.size());
  for (size_t i = 0; i < a.lrs.size(); ++i) {
    CAPTURE(i);
    CHECK(a.lrs[i] == b.lrs[i]);
    CHECK(a.draws[i] == b.draws[i]);
  }
  REQUIRE(a.final_param.size() == b.final_param.size());
  CHECK(std::memcmp(a.final_param.data(), b.final_param.data(), a.final_param.size() * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("resume: Adam + StepLR stopped at step 7 and resumed equals the uninterrupted run") {
  const auto options = lo::AdamOptions(1e-2);
  MakeScheduler make = [](lo::Optimizer& o) { return std::make_unique<lo::StepLR>(o, 3, 0.5); };
  const Trace whole = uninterrupted<lo::Adam>(options, make, 15);
  const Trace parts = resumed<lo::Adam>(options, make, 7, 15);
  check_same(whole, parts);
  CHECK(whole.lrs.back() == doctest::Approx(1e-2 * 0.5 * 0.5 * 0.5 * 0.5));  // step 14: 4 halvings
}

TEST_CASE("resume: SGD + WarmupCosine and CosineAnnealingLR resume exactly") {
  const auto options = lo::SGDOptions(0.1).momentum(0.9);
  MakeScheduler warmup = [](lo::Optimizer& o) { return std::make_unique<lo::WarmupCosine>(o, 4, 20, 0.01); };
  check_same(uninterrupted<lo::SGD>(options, warmup, 20), resumed<lo::SGD>(options, warmup, 9, 20));
  MakeScheduler cosine = [](lo::Optimizer& o) { return std::make_unique<lo::CosineAnnealingLR>(o, 12); };
  check_same(uninterrupted<lo::SGD>(options, cosine, 12), resumed<lo::SGD>(options, cosine, 5, 12));
}

TEST_CASE("resume: the optimizer's state dict carries initial_lr once a scheduler is built") {
  ls::Tensor p = fresh_param();
  lo::SGD sgd({p}, lo::SGDOptions(0.4));
  CHECK(!sgd.initial_lr().has_value());
  CHECK(sgd.state_dict().count("param_groups.initial_lr") == 0);
  lo::StepLR sched(sgd, 1, 0.5);
  sched.step();
  sched.step();
  CHECK(sgd.lr() == doctest::Approx(0.1));
  const lo::OptimizerState saved = sgd.state_dict();
  CHECK(saved.at("param_groups.initial_lr").item<double>() == 0.4);

  // The case: a scheduler built on a loaded optimizer starts from 0.4, not 0.1.
  ls::Tensor q = fresh_param();
  lo::SGD again({q}, lo::SGDOptions(0.4));
  again.load_state_dict(saved);
  CHECK(again.lr() == doctest::Approx(0.1));
  lo::StepLR rebuilt(again, 1, 0.5);
  CHECK(rebuilt.base_lr() == 0.4);
  // PyTorch's last_epoch argument: continue after epoch 1 -> epoch 2's lr.
  lo::SGD third({q}, lo::SGDOptions(0.4));
  third.load_state_dict(saved);
  lo::StepLR continued(third, 1, 0.5, /*last_epoch=*/1);
  CHECK(continued.last_epoch() == 2);
  CHECK(third.lr() == doctest::Approx(0.1));
}

TEST_CASE("resume: bad scheduler states and resuming without initial_lr are refused with messages") {
  ls::Tensor p = fresh_param();
  lo::SGD sgd({p}, lo::SGDOptions(0.1));
  CHECK_THROWS_WITH_AS(lo::StepLR(sgd, 2, 0.5, /*last_epoch=*/3), doctest::Contains("initial_lr"), ls::Error);
  lo::StepLR step(sgd, 2, 0.5);
  lo::OptimizerState s = step.state_dict();
  CHECK(s.at("last_epoch").item<int64_t>() == 0);
  CHECK(s.at("step_size").item<double>() == 2);
  lo::OptimizerState missing = s;
  missing.erase("last_epoch");
  CHECK_THROWS_WITH_AS(step.load_state_dict(missing), doctest::Contains("'last_epoch'"), ls::Error);
  lo::OptimizerState extra = s;
  extra["T_max"] = ls::scalar_tensor(3.0);
  CHECK_THROWS_WITH_AS(step.load_state_dict(extra), doctest::Contains("unexpected key 'T_max'"), ls::Error);
  lo::CosineAnnealingLR cosine(sgd, 5);
  CHECK_THROWS_WITH_AS(cosine.load_state_dict(s), doctest::Contains("CosineAnnealingLR.load_state_dict"),
                       ls::Error);
}

TEST_CASE("rng state: set_rng_state(get_rng_state()) replays the stream, a bad state is refused") {
  ls::manual_seed(3);
  ls::randn({3});  // leaves a Box-Muller spare
  const ls::Tensor state = ls::get_rng_state();
  CHECK(state.dtype() == ls::kUInt8);
  const std::vector<float> a = ls::randn({5}).to_vector<float>();
  const std::vector<float> ua = ls::rand({3}).to_vector<float>();
  ls::manual_seed(99);
  ls::set_rng_state(state);
  CHECK(ls::randn({5}).to_vector<float>() == a);
  CHECK(ls::rand({3}).to_vector<float>() == ua);
  // A private generator too.
  ls::Generator g(11);
  g.next_u64();
  ls::Generator h;
  h.set_state(g.get_state());
  CHECK(h.next_u64() == g.next_u64());
  CHECK(h.normal() == g.normal());
  CHECK_THROWS_WITH_AS(ls::set_rng_state(ls::zeros({4})), doctest::Contains("uint8"), ls::Error);
  CHECK_THROWS_WITH_AS(ls::set_rng_state(ls::zeros({4}, ls::TensorOptions().dtype(ls::kUInt8))),
                       doctest::Contains("get_state"), ls::Error);
  std::string truncated = g.get_state();
  truncated.resize(truncated.size() / 2);
  CHECK_THROWS_WITH_AS(h.set_state(truncated), doctest::Contains("truncated or corrupt"), ls::Error);
}
