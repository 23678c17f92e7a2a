// tests/optim/test_sgd.cpp — SGD against hand-computed trajectories (plain
// doubles, the formulas of optim/sgd.h), the skip-undefined-grad rule, the fused
// and reference paths, and option errors.
#include <doctest/doctest.h>

#include <optional>

#include "core/grad_mode.h"
#include "core/parallel.h"
#include "optim/sgd.h"
#include "optim_test_util.h"

namespace ls = lockstep;
using optim_test::kP0;
using optim_test::make_param;
using optim_test::set_step_grad;
using optim_test::values;

namespace {

struct SgdRef {
  double lr, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

// torch.optim.SGD's algorithm written out for one scalar parameter.
std::vector<double> sgd_reference(const SgdRef& h, int steps, const std::vector<double>& p0 = kP0) {
  std::vector<double> out;
  for (size_t i = 0; i < p0.size(); ++i) {
    double p = p0[i];
    std::optional<double> buf;
    for (int t = 1; t <= steps; ++t) {
      double d = optim_test::grad_value(t, i) + h.weight_decay * p;
      if (h.momentum != 0) {
        buf = buf ? h.momentum * *buf + (1 - h.dampening) * d : d;
        d = h.nesterov ? d + h.momentum * *buf : *buf;
      }
      p -= h.lr * d;
    }
    out.push_back(p);
  }
  return out;
}

void run(ls::optim::Optimizer& opt, const ls::Tensor& p, int steps, int first_step = 1) {
  for (int t = first_step; t < first_step + steps; ++t) {
    set_step_grad(p, t);
    opt.step();
  }
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(tol));
}

}  // namespace

TEST_CASE("sgd: plain step with weight decay follows p -= lr * (g + wd * p)") {
  ls::Tensor p = make_param(kP0);
  ls::optim::SGD sgd({p}, ls::optim::SGDOptions(0.1).weight_decay(0.05));
  run(sgd, p, 4);
  check_close(values(p), sgd_reference({.lr = 0.1, .weight_decay = 0.05}, 4), 1e-13);
}

TEST_CASE("sgd: momentum with dampening and weight decay matches the reference trajectory") {
  ls::Tensor p = make_param(kP0);
  ls::optim::SGD sgd({p},
                     ls::optim::SGDOptions(0.1).momentum(0.9).dampening(0.1).weight_decay(0.01));
  run(sgd, p, 5);
  std::vector<double> want =
      sgd_reference({.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01}, 5);
  check_close(values(p), want, 1e-13);
  // The same numbers PyTorch 1.13 printed for this trajectory (a guard on the reference itself).
  CHECK(want[0] == doctest::Approx(-0.06687404466760166).epsilon(1e-12));
  CHECK(want[2] == doctest::Approx(2.22005736104244).epsilon(1e-12));
}

TEST_CASE("sgd: nesterov momentum matches the reference trajectory") {
  ls::Tensor p = make_param(kP0);
  ls::optim::SGD sgd({p},
                     ls::optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01));
  run(sgd, p, 5);
  std::vector<double> want =
      sgd_reference({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}, 5);
  check_close(values(p), want, 1e-13);
  CHECK(want[1] == doctest::Approx(-0.6803934846693539).epsilon(1e-12));
}

TEST_CASE("sgd: float32 parameters follow the double reference to float precision") {
  ls::Tensor p = make_param(kP0, ls::kFloat32);
  ls::optim::SGD sgd({p}, ls::optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
  run(sgd, p, 5);
  CHECK(p.dtype() == ls::kFloat32);
  check_close(values(p), sgd_reference({.lr = 0.1, .momentum = 0.9, .nesterov = true}, 5), 1e-5);
}

TEST_CASE("sgd: a parameter with an undefined grad is skipped, momentum and step count untouched") {
  ls::Tensor a = make_param(kP0);
  ls::Tensor b = make_param(kP0);
  ls::optim::SGD sgd({a, b}, ls::optim::SGDOptions(0.1).momentum(0.9));
  set_step_grad(a, 1);
  set_step_grad(b, 1);
  sgd.step();
  const std::vector<double> b_after_1 = values(b);
  const std::vector<double> buf_after_1 =
      values(sgd.state_dict().at("state.1.momentum_buffer").clone());

  // Steps 2 and 3: b takes no part (its grad is undefined), a keeps training.
  for (int t = 2; t <= 3; ++t) {
    sgd.zero_grad();
    set_step_grad(a, t);
    CHECK_FALSE(b.grad().defined());
    sgd.step();
  }
  CHECK(values(b) == b_after_1);
  CHECK(values(sgd.state_dict().at("state.1.momentum_buffer")) == buf_after_1);
  CHECK(sgd.step_count(0) == 3);
  CHECK(sgd.step_count(1) == 1);

  // When b gets a gradient again its buffer continues from step 1 (not restarted):
  // b's own trajectory is a two-step one with gradients of steps 1 and 4.
  sgd.zero_grad();
  set_step_grad(b, 4);
  sgd.step();
  for (size_t i = 0; i < kP0.size(); ++i) {
    double p = kP0[i], buf = optim_test::grad_value(1, i);
    p -= 0.1 * buf;
    buf = 0.9 * buf + optim_test::grad_value(4, i);
    p -= 0.1 * buf;
    CHECK(values(b)[i] == doctest::Approx(p).epsilon(1e-13));
  }
  CHECK(sgd.step_count(1) == 2);
  CHECK(sgd.step_count(0) == 3);  // a had no grad at step 4 (zero_grad cleared it)
}

TEST_CASE("sgd: a parameter never stepped has no state, and zero_grad clears or zeroes grads") {
  ls::Tensor a = make_param(kP0), b = make_param(kP0);
  ls::optim::SGD sgd({a, b}, ls::optim::SGDOptions(0.1).momentum(0.5));
  set_step_grad(a, 1);
  sgd.step();
  ls::optim::OptimizerState sd = sgd.state_dict();
  CHECK(sd.count("state.0.momentum_buffer") == 1);
  CHECK(sd.count("state.1.momentum_buffer") == 0);
  CHECK(sd.count("state.1.step") == 0);
  CHECK(values(b) == kP0);

  sgd.zero_grad(/*set_to_none=*/false);
  REQUIRE(a.grad().defined());
  CHECK(values(a.grad()) == std::vector<double>{0, 0, 0});
  sgd.zero_grad();
  CHECK_FALSE(a.grad().defined());
}

TEST_CASE("sgd: non-contiguous parameters take the tensor-op path and match the fused path") {
  // p is a transposed (non-contiguous) leaf; q holds the same values contiguously.
  ls::Tensor base = ls::tensor(std::vector<double>{1, -2, 3, 0.5, -1.5, 2.5}, {2, 3});
  ls::Tensor p = base.t();  // (3, 2), strides (1, 3)
  p.requires_grad_(true);
  REQUIRE_FALSE(p.is_contiguous());
  ls::Tensor q = p.detach().contiguous().clone();
  q.requires_grad_(true);
  REQUIRE(q.is_contiguous());
  auto opts = ls::optim::SGDOptions(0.05).momentum(0.9).dampening(0.2).weight_decay(0.1);
  ls::optim::SGD sp({p}, opts), sq({q}, opts);
  for (int t = 1; t <= 4; ++t) {
    set_step_grad(p, t);
    set_step_grad(q, t);
    sp.step();
    sq.step();
  }
  std::vector<double> vp = values(p), vq = values(q);
  for (size_t i = 0; i < vp.size(); ++i) CHECK(vp[i] == doctest::Approx(vq[i]).epsilon(1e-13));
}

TEST_CASE("sgd: large parameters split across threads give the same result as the reference") {
  const int64_t n = 100003;  // several parallel_for chunks, odd tail
  std::vector<double> p0(static_cast<size_t>(n));
  for (size_t i = 0; i < p0.size(); ++i) p0[i] = std::cos(0.001 * static_cast<double>(i));
  const int threads = ls::get_num_threads();
  ls::set_num_threads(2);
  ls::Tensor p = make_param(p0);
  ls::optim::SGD sgd({p}, ls::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
  run(sgd, p, 3);
  ls::set_num_threads(threads);
  std::vector<double> want =
      sgd_reference({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01}, 3, p0);
  std::vector<double> got = values(p);
  for (size_t i = 0; i < got.size(); i += 997)
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
  CHECK(got.back() == doctest::Approx(want.back()).epsilon(1e-12));
}

TEST_CASE("sgd: a step bumps the parameter's storage version") {
  ls::Tensor p = make_param(kP0);
  ls::optim::SGD sgd({p}, ls::optim::SGDOptions(0.1));
  const uint64_t before = p.impl()->storage->version();
  set_step_grad(p, 1);
  sgd.step();
  CHECK(p.impl()->storage->version() > before);
}

TEST_CASE("sgd: a step driven by backward matches the analytic gradient") {
  // loss = sum((w - target)^2), dloss/dw = 2 (w - target).
  ls::Tensor w = make_param(kP0);
  ls::Tensor target = ls::tensor(std::vector<double>{1.0, 0.0, -1.0});
  ls::optim::SGD sgd({w}, ls::optim::SGDOptions(0.1).momentum(0.5));
  std::vector<double> ref = kP0, buf(3, 0.0);
  for (int t = 1; t <= 3; ++t) {
    sgd.zero_grad();
    ((w - target) * (w - target)).sum().backward();
    sgd.step();
    for (size_t i = 0; i < 3; ++i) {
      const double g = 2 * (ref[i] - target.to_vector<double>()[i]);
      buf[i] = t == 1 ? g : 0.5 * buf[i] + g;
      ref[i] -= 0.1 * buf[i];
    }
  }
  check_close(values(w), ref, 1e-13);
}

TEST_CASE("sgd: bad parameters and options throw clear errors") {
  ls::Tensor p = make_param(kP0);
  CHECK_THROWS_WITH_AS(ls::optim::SGD({p}, ls::optim::SGDOptions(0.1).nesterov(true)),
                       doctest::Contains("Nesterov momentum requires momentum > 0"), ls::Error);
  CHECK_THROWS_WITH_AS(
      ls::optim::SGD({p}, ls::optim::SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov(true)),
      doctest::Contains("dampening == 0"), ls::Error);
  CHECK_THROWS_WITH_AS(ls::optim::SGD({p}, ls::optim::SGDOptions(-1.0)),
                       doctest::Contains("learning rate"), ls::Error);
  CHECK_THROWS_WITH_AS(ls::optim::SGD({}, ls::optim::SGDOptions(0.1)),
                       doctest::Contains("empty parameter list"), ls::Error);
  CHECK_THROWS_WITH_AS(ls::optim::SGD({p * 2.0}, ls::optim::SGDOptions(0.1)),
                       doctest::Contains("is not a leaf"), ls::Error);
  CHECK_THROWS_WITH_AS(ls::optim::SGD({p, p}, ls::optim::SGDOptions(0.1)),
                       doctest::Contains("more than once"), ls::Error);
  ls::optim::SGD sgd({p}, ls::optim::SGDOptions(0.1));
  p.set_grad(ls::zeros({3}, ls::kFloat64));
  p.mutable_grad() = ls::zeros({4}, ls::kFloat64);  // bypasses set_grad's check on purpose
  CHECK_THROWS_WITH_AS(sgd.step(), doctest::Contains("its grad has shape [4]"), ls::Error);
}

TEST_CASE("sgd: lr can be read and set, as schedulers do") {
  ls::Tensor p = make_param(kP0);
  ls::optim::SGD sgd({p}, ls::optim::SGDOptions(0.1));
  CHECK(sgd.lr() == 0.1);
  sgd.set_lr(0.02);
  CHECK(sgd.lr() == 0.02);
  set_step_grad(p, 1);
  sgd.step();
  for (size_t i = 0; i < 3; ++i) {
    CHECK(values(p)[i] ==
          doctest::Approx(kP0[i] - 0.02 * optim_test::grad_value(1, i)).epsilon(1e-14));
  }
  CHECK_THROWS_AS(sgd.set_lr(-1.0), ls::Error);
}
