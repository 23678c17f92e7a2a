// tests/optim/test_adam.cpp — Adam, AdamW and amsgrad against hand-computed
// trajectories (plain doubles, the formulas of optim/adam.h), per-parameter
// bias correction under skipped steps, and the fused vs tensor-op paths.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "optim/adam.h"
#include "optim_test_util.h"

namespace ls = lockstep;
using optim_test::kP0;
using optim_test::make_param;
using optim_test::set_step_grad;
using optim_test::values;

namespace {

struct AdamRef {
  double lr, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false, amsgrad = false;
};

// torch.optim.Adam / AdamW written out for one scalar parameter, over the steps
// `ts` (gradient of step ts[k]; the bias correction counts the parameter's own steps).
double adam_reference(const AdamRef& h, double p, size_t i, const std::vector<int>& ts) {
  double m = 0, v = 0, v_max = 0;
  int t = 0;
  for (int step : ts) {
    ++t;
    double g = optim_test::grad_value(step, i);
    if (h.decoupled) {
      p *= 1 - h.lr * h.weight_decay;
    } else {
      g += h.weight_decay * p;
    }
    m = h.beta1 * m + (1 - h.beta1) * g;
    v = h.beta2 * v + (1 - h.beta2) * g * g;
    double v_used = v;
    if (h.amsgrad) v_used = v_max = std::max(v_max, v);
    const double denom = std::sqrt(v_used) / std::sqrt(1 - std::pow(h.beta2, t)) + h.eps;
    p -= h.lr / (1 - std::pow(h.beta1, t)) * m / denom;
  }
  return p;
}

std::vector<int> steps_1_to(int n) {
  std::vector<int> ts;
  for (int t = 1; t <= n; ++t) ts.push_back(t);
  return ts;
}

void run(ls::optim::Optimizer& opt, const ls::Tensor& p, int steps) {
  for (int t = 1; t <= steps; ++t) {
    set_step_grad(p, t);
    opt.step();
  }
}

void check_trajectory(const ls::Tensor& p, const AdamRef& h, int steps, double tol) {
  std::vector<double> got = values(p);
  for (size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i] == doctest::Approx(adam_reference(h, kP0[i], i, steps_1_to(steps))).epsilon(tol));
  }
}

}  // namespace

TEST_CASE("adam: L2 weight decay folded into the gradient matches the reference trajectory") {
  ls::Tensor p = make_param(kP0);
  ls::optim::Adam adam({p}, ls::optim::AdamOptions(0.01).betas(0.8, 0.99).weight_decay(0.1));
  run(adam, p, 5);
  AdamRef h{.lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .weight_decay = 0.1};
  check_trajectory(p, h, 5, 1e-13);
  // PyTorch 1.13 printed these for the same trajectory (a guard on the reference itself).
  CHECK(adam_reference(h, kP0[0], 0, steps_1_to(5)) ==
        doctest::Approx(0.46601375345210877).epsilon(1e-12));
  CHECK(adam_reference(h, kP0[1], 1, steps_1_to(5)) ==
        doctest::Approx(-0.9914406490469152).epsilon(1e-12));
}

TEST_CASE("adam: AdamW decays the weight before the update (decoupled weight decay)") {
  ls::Tensor p = make_param(kP0);
  ls::optim::AdamW adamw({p}, ls::optim::AdamWOptions(0.01).betas(0.8, 0.99).weight_decay(0.1));
  run(adamw, p, 5);
  AdamRef h{.lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .weight_decay = 0.1, .decoupled = true};
  check_trajectory(p, h, 5, 1e-13);
  CHECK(adam_reference(h, kP0[2], 2, steps_1_to(5)) ==
        doctest::Approx(2.011980924064706).epsilon(1e-12));
}

TEST_CASE("adam: amsgrad uses the running maximum of the second moment") {
  ls::Tensor p = make_param(kP0);
  ls::optim::Adam adam(
      {p}, ls::optim::AdamOptions(0.01).betas(0.8, 0.99).weight_decay(0.1).amsgrad(true));
  run(adam, p, 5);
  AdamRef h{.lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .weight_decay = 0.1, .amsgrad = true};
  check_trajectory(p, h, 5, 1e-13);
  CHECK(adam_reference(h, kP0[1], 1, steps_1_to(5)) ==
        doctest::Approx(-0.9914610431179458).epsilon(1e-12));
  CHECK(adam.state_dict().count("state.0.max_exp_avg_sq") == 1);
}

TEST_CASE("adam: default options are PyTorch's (AdamW's weight decay is 0.01, Adam's 0)") {
  CHECK(ls::optim::AdamOptions(1e-3).weight_decay() == 0.0);
  CHECK(ls::optim::AdamWOptions(1e-3).weight_decay() == 0.01);
  auto o = ls::optim::AdamOptions(1e-3);
  CHECK(o.beta1() == 0.9);
  CHECK(o.beta2() == 0.999);
  CHECK(o.eps() == 1e-8);
  CHECK_FALSE(o.amsgrad());
  ls::Tensor p = make_param(kP0);
  ls::optim::AdamW adamw({p}, ls::optim::AdamWOptions(1e-3));
  run(adamw, p, 3);
  check_trajectory(p, {.lr = 1e-3, .weight_decay = 0.01, .decoupled = true}, 3, 1e-13);
}

TEST_CASE("adam: float32 parameters follow the double reference to float precision") {
  ls::Tensor p = make_param(kP0, ls::kFloat32);
  ls::optim::Adam adam({p}, ls::optim::AdamOptions(0.01).weight_decay(0.1));
  run(adam, p, 5);
  check_trajectory(p, {.lr = 0.01, .weight_decay = 0.1}, 5, 1e-5);
}

TEST_CASE("adam: a skipped parameter keeps its moments and its own bias-correction count") {
  ls::Tensor a = make_param(kP0), b = make_param(kP0);
  ls::optim::Adam adam({a, b}, ls::optim::AdamOptions(0.01).betas(0.8, 0.99));
  // b has a gradient at steps 1 and 4 only; a at every step.
  for (int t = 1; t <= 4; ++t) {
    adam.zero_grad();
    set_step_grad(a, t);
    if (t == 1 || t == 4) set_step_grad(b, t);
    if (t == 3) {
      const std::vector<double> m = values(adam.state_dict().at("state.1.exp_avg").clone());
      const std::vector<double> b_before = values(b);
      adam.step();
      CHECK(values(adam.state_dict().at("state.1.exp_avg")) == m);
      CHECK(values(b) == b_before);
      CHECK(adam.step_count(1) == 1);
      continue;
    }
    adam.step();
  }
  CHECK(adam.step_count(0) == 4);
  CHECK(adam.step_count(1) == 2);
  AdamRef h{.lr = 0.01, .beta1 = 0.8, .beta2 = 0.99};
  for (size_t i = 0; i < 3; ++i) {
    CHECK(values(a)[i] ==
          doctest::Approx(adam_reference(h, kP0[i], i, {1, 2, 3, 4})).epsilon(1e-13));
    // b's second step uses t = 2 in its bias correction, with step 4's gradient.
    CHECK(values(b)[i] == doctest::Approx(adam_reference(h, kP0[i], i, {1, 4})).epsilon(1e-13));
  }
}

TEST_CASE("adam: non-contiguous parameters take the tensor-op path and match the fused path") {
  for (bool amsgrad : {false, true}) {
    ls::Tensor base = ls::tensor(std::vector<double>{1, -2, 3, 0.5, -1.5, 2.5}, {2, 3});
    ls::Tensor p = base.t();
    p.requires_grad_(true);
    REQUIRE_FALSE(p.is_contiguous());
    ls::Tensor q = p.detach().contiguous().clone();
    q.requires_grad_(true);
    ls::optim::AdamW sp({p}, ls::optim::AdamWOptions(0.05).weight_decay(0.1).amsgrad(amsgrad));
    ls::optim::AdamW sq({q}, ls::optim::AdamWOptions(0.05).weight_decay(0.1).amsgrad(amsgrad));
    ls::optim::Adam lp({p}, ls::optim::AdamOptions(0.05).weight_decay(0.1).amsgrad(amsgrad));
    ls::optim::Adam lq({q}, ls::optim::AdamOptions(0.05).weight_decay(0.1).amsgrad(amsgrad));
    for (int t = 1; t <= 4; ++t) {
      set_step_grad(p, t);
      set_step_grad(q, t);
      sp.step();
      sq.step();
      lp.step();
      lq.step();
    }
    std::vector<double> vp = values(p), vq = values(q);
    for (size_t i = 0; i < vp.size(); ++i) CHECK(vp[i] == doctest::Approx(vq[i]).epsilon(1e-13));
  }
}

TEST_CASE("adam: large parameters split across threads give the same result as the reference") {
  const int64_t n = 70001;
  std::vector<double> p0(static_cast<size_t>(n));
  for (size_t i = 0; i < p0.size(); ++i) p0[i] = std::sin(0.002 * static_cast<double>(i));
  const int threads = ls::get_num_threads();
  ls::set_num_threads(2);
  ls::Tensor p = make_param(p0);
  ls::optim::AdamW adamw({p}, ls::optim::AdamWOptions(0.01));
  run(adamw, p, 3);
  ls::set_num_threads(threads);
  std::vector<double> got = values(p);
  AdamRef h{.lr = 0.01, .weight_decay = 0.01, .decoupled = true};
  for (size_t i = 0; i < got.size(); i += 1009) {
    CHECK(got[i] == doctest::Approx(adam_reference(h, p0[i], i, {1, 2, 3})).epsilon(1e-12));
  }
}

TEST_CASE("adam: bad options throw clear errors") {
  ls::Tensor p = make_param(kP0);
  CHECK_THROWS_WITH_AS(ls::optim::Adam({p}, ls::optim::AdamOptions(0.1).betas(1.0, 0.999)),
                       doctest::Contains("Adam: invalid beta1"), ls::Error);
  CHECK_THROWS_WITH_AS(ls::optim::AdamW({p}, ls::optim::AdamWOptions(0.1).eps(-1)),
                       doctest::Contains("AdamW: invalid eps"), ls::Error);
  CHECK_THROWS_WITH_AS(ls::optim::Adam({p}, ls::optim::AdamOptions(0.1).weight_decay(-0.1)),
                       doctest::Contains("invalid weight_decay"), ls::Error);
}
