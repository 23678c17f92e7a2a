// tests/optim/test_lr_scheduler.cpp — each scheduler's lr sequence against its
// closed form (written here with plain doubles), and that it drives the optimizer.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <numbers>

#include "optim/lr_scheduler.h"
#include "optim/sgd.h"
#include "optim_test_util.h"

namespace ls = lockstep;

namespace {

// Steps the scheduler `epochs` times, checking before each step that
// get_last_lr() and the optimizer's lr equal closed_form(epoch).
void check_sequence(ls::optim::LRScheduler& sched, ls::optim::Optimizer& opt, int epochs,
                    const std::function<double(int)>& closed_form) {
  for (int epoch = 0; epoch < epochs; ++epoch) {
    CAPTURE(epoch);
    CHECK(sched.last_epoch() == epoch);
    CHECK(sched.get_last_lr() == doctest::Approx(closed_form(epoch)).epsilon(1e-14));
    CHECK(opt.lr() == sched.get_last_lr());
    sched.step();
  }
}

}  // namespace

TEST_CASE("lr_scheduler: StepLR multiplies by gamma every step_size epochs") {
  ls::Tensor p = optim_test::make_param(optim_test::kP0);
  ls::optim::SGD sgd({p}, ls::optim::SGDOptions(0.1));
  ls::optim::StepLR sched(sgd, /*step_size=*/3, /*gamma=*/0.5);
  CHECK(sched.base_lr() == 0.1);
  check_sequence(sched, sgd, 10, [](int t) { return 0.1 * std::pow(0.5, t / 3); });
  CHECK(sgd.lr() == doctest::Approx(0.1 * 0.125));  // epoch 10: floor(10/3) = 3 halvings
}

TEST_CASE("lr_scheduler: CosineAnnealingLR follows the half cosine from base_lr to eta_min") {
  ls::Tensor p = optim_test::make_param(optim_test::kP0);
  ls::optim::SGD sgd({p}, ls::optim::SGDOptions(0.1));
  ls::optim::CosineAnnealingLR sched(sgd, /*T_max=*/10, /*eta_min=*/0.01);
  check_sequence(sched, sgd, 13, [](int t) {
    return 0.01 + (0.1 - 0.01) * (1 + std::cos(std::numbers::pi * t / 10.0)) / 2;
  });
  CHECK(sched.lr_at(10) == doctest::Approx(0.01));
  CHECK(sched.lr_at(5) == doctest::Approx(0.055));
}

TEST_CASE("lr_scheduler: LinearWarmup ramps from 0 to base_lr, then stays") {
  ls::Tensor p = optim_test::make_param(optim_test::kP0);
  ls::optim::SGD sgd({p}, ls::optim::SGDOptions(0.2));
  ls::optim::LinearWarmup sched(sgd, /*warmup_steps=*/4);
  check_sequence(sched, sgd, 8, [](int t) { return t < 4 ? 0.2 * t / 4.0 : 0.2; });
}

TEST_CASE("lr_scheduler: WarmupCosine warms up linearly then decays to min_lr and stays there") {
  ls::Tensor p = optim_test::make_param(optim_test::kP0);
  ls::optim::SGD sgd({p}, ls::optim::SGDOptions(1e-3));
  ls::optim::WarmupCosine sched(sgd, /*warmup_steps=*/3, /*total_steps=*/11, /*min_lr=*/1e-5);
  check_sequence(sched, sgd, 15, [](int t) {
    if (t < 3) return 1e-3 * t / 3.0;
    const double s = std::min(1.0, (t - 3) / 8.0);
    return 1e-5 + (1e-3 - 1e-5) * (1 + std::cos(std::numbers::pi * s)) / 2;
  });
  CHECK(sched.lr_at(3) == doctest::Approx(1e-3));
  CHECK(sched.lr_at(11) == doctest::Approx(1e-5));
  CHECK(sched.lr_at(100) == doctest::Approx(1e-5));
}

TEST_CASE("lr_scheduler: the scheduled lr is the one the optimizer steps with") {
  ls::Tensor p = optim_test::make_param({1.0});
  ls::optim::SGD sgd({p}, ls::optim::SGDOptions(0.1));
  ls::optim::StepLR sched(sgd, 1, 0.5);
  double want = 1.0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    p.set_grad(ls::ones({1}, ls::kFloat64));
    sgd.step();
    want -= 0.1 * std::pow(0.5, epoch);
    sched.step();
  }
  CHECK(p.item<double>() == doctest::Approx(want).epsilon(1e-14));
}

TEST_CASE("lr_scheduler: bad arguments throw clear errors") {
  ls::Tensor p = optim_test::make_param(optim_test::kP0);
  ls::optim::SGD sgd({p}, ls::optim::SGDOptions(0.1));
  CHECK_THROWS_WITH_AS(ls::optim::StepLR(sgd, 0), doctest::Contains("step_size must be positive"),
                       ls::Error);
  CHECK_THROWS_WITH_AS(ls::optim::CosineAnnealingLR(sgd, 0), doctest::Contains("T_max"), ls::Error);
  CHECK_THROWS_WITH_AS(ls::optim::WarmupCosine(sgd, 5, 5),
                       doctest::Contains("warmup_steps < total_steps"), ls::Error);
}
