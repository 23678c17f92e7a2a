// tests/optim/test_clip_grad.cpp — clip_grad_norm_: total norms (2, 1, 3, inf),
// in-place scaling, undefined grads skipped, thread-count independence.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/parallel.h"
#include "optim/clip_grad.h"
#include "optim_test_util.h"

namespace ls = lockstep;
using optim_test::values;

namespace {

// Three parameters: grads a = (3, -4), b = ((1, 2), (-2, 0.5)), c = none.
struct Params {
  ls::Tensor a = optim_test::make_param({0, 0});
  ls::Tensor b = ls::zeros({2, 2}, ls::TensorOptions().dtype(ls::kFloat64).requires_grad(true));
  ls::Tensor c = optim_test::make_param({0, 0});
  Params() {
    a.set_grad(ls::tensor(std::vector<double>{3, -4}));
    b.set_grad(ls::tensor(std::vector<double>{1, 2, -2, 0.5}, {2, 2}));
  }
  std::vector<ls::Tensor> list() const { return {a, b, c}; }
};

const std::vector<double> kAll = {3, -4, 1, 2, -2, 0.5};

}  // namespace

TEST_CASE("clip_grad: p-norms of all gradients together, and the scaled gradients") {
  for (double p : {2.0, 1.0, 3.0}) {
    CAPTURE(p);
    Params ps;
    double want = 0;
    for (double g : kAll) want += std::pow(std::abs(g), p);
    want = std::pow(want, 1 / p);
    const double total = ls::optim::clip_grad_norm_(ps.list(), 1.0, p);
    CHECK(total == doctest::Approx(want).epsilon(1e-14));
    const double coef = 1.0 / (want + 1e-6);
    CHECK(values(ps.a.grad())[1] == doctest::Approx(-4 * coef).epsilon(1e-14));
    CHECK(values(ps.b.grad())[3] == doctest::Approx(0.5 * coef).epsilon(1e-14));
    CHECK_FALSE(ps.c.grad().defined());  // skipped, not made into zeros
  }
  // Values PyTorch 1.13 printed for the 2-norm case.
  Params ps;
  CHECK(ls::optim::clip_grad_norm_(ps.list(), 1.0) ==
        doctest::Approx(5.852349955359813).epsilon(1e-14));
  CHECK(values(ps.a.grad())[0] == doctest::Approx(0.5126145070388306).epsilon(1e-12));
}

TEST_CASE("clip_grad: the infinity norm is the largest absolute gradient") {
  Params ps;
  const double total =
      ls::optim::clip_grad_norm_(ps.list(), 1.0, std::numeric_limits<double>::infinity());
  CHECK(total == 4.0);
  CHECK(values(ps.a.grad())[1] == doctest::Approx(-4.0 / (4.0 + 1e-6)).epsilon(1e-14));
}

TEST_CASE("clip_grad: gradients under max_norm are left unchanged") {
  Params ps;
  const double total = ls::optim::clip_grad_norm_(ps.list(), 10.0);
  CHECK(total == doctest::Approx(std::sqrt(9 + 16 + 1 + 4 + 4 + 0.25)));
  CHECK(values(ps.a.grad()) == std::vector<double>{3, -4});
  CHECK(values(ps.b.grad()) == std::vector<double>{1, 2, -2, 0.5});
}

TEST_CASE("clip_grad: no gradients gives norm 0, and float32 gradients work") {
  ls::Tensor p = optim_test::make_param({1, 2});
  CHECK(ls::optim::clip_grad_norm_({p}, 1.0) == 0.0);
  ls::Tensor q = optim_test::make_param({1, 2}, ls::kFloat32);
  q.set_grad(ls::tensor(std::vector<float>{6, 8}));
  CHECK(ls::optim::clip_grad_norm_({q}, 5.0) == doctest::Approx(10.0));
  CHECK(values(q.grad())[1] == doctest::Approx(4.0).epsilon(1e-6));
  CHECK_THROWS_WITH_AS(ls::optim::clip_grad_norm_({q}, 1.0, 0.0), doctest::Contains("norm_type"),
                       ls::Error);
}

TEST_CASE("clip_grad: the total norm does not depend on the number of threads") {
  const int64_t n = 200001;
  std::vector<double> g(static_cast<size_t>(n));
  for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.37 * static_cast<double>(i)) * 1e-3;
  ls::Tensor p = ls::zeros({n}, ls::TensorOptions().dtype(ls::kFloat32).requires_grad(true));
  const int threads = ls::get_num_threads();
  double norms[2];
  for (int k = 0; k < 2; ++k) {
    ls::set_num_threads(k + 1);
    p.set_grad(ls::tensor(g, {n}, ls::kFloat32));
    norms[k] = ls::optim::clip_grad_norm_({p}, 1e9);
  }
  ls::set_num_threads(threads);
  CHECK(norms[0] == norms[1]);  // bitwise: fixed blocks, fixed combination order
  double want = 0;
  for (double v : g) want += static_cast<double>(static_cast<float>(v)) * static_cast<float>(v);
  CHECK(norms[0] == doctest::Approx(std::sqrt(want)).epsilon(1e-12));
}
