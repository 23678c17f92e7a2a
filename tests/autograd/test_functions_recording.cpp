// tests/autograd/test_functions_recording.cpp — when ops record a Node and when
// they do not, node names, saved tensors, and gradcheck catching a wrong formula.
#include <doctest/doctest.h>

#include <memory>
#include <tuple>
#include <vector>

#include "autograd/function.h"
#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using ls::testing::randn64;
using Inputs = std::vector<ls::Tensor>;

TEST_CASE("functions: ops on inputs that do not require grad record nothing") {
  ls::Tensor a = ls::randn({2, 3}), b = ls::randn({3});
  std::vector<ls::Tensor> results = {a + b, a * 2.0, a.relu(), a.sum(), a.t(), a.view({6}),
                                     ls::matmul(a, b), a.softmax(1), ls::cat({a, a}),
                                     std::get<0>(a.max(1)), a.index_select(0, ls::arange(2))};
  for (const ls::Tensor& r : results) {
    CHECK(r.grad_fn() == nullptr);
    CHECK_FALSE(r.requires_grad());
  }
}

TEST_CASE("functions: under NoGradGuard nothing is recorded") {
  ls::Tensor w = ls::randn({3, 3}, ls::requires_grad());
  {
    ls::NoGradGuard no_grad;
    ls::Tensor y = ls::matmul(w, w).relu().sum();
    CHECK(y.grad_fn() == nullptr);
    CHECK_FALSE(y.requires_grad());
    CHECK(w.t().grad_fn() == nullptr);
  }
  CHECK(w.t().grad_fn() != nullptr);  // recording resumes after the guard
}

TEST_CASE("functions: nodes carry PyTorch-style names and one edge per input") {
  ls::Tensor a = ls::randn({2, 2}, ls::requires_grad());
  ls::Tensor b = ls::randn({2, 2});
  CHECK((a + b).grad_fn()->name() == "AddBackward");
  CHECK((a - b).grad_fn()->name() == "SubBackward");
  CHECK((a * b).grad_fn()->name() == "MulBackward");
  CHECK((a / b).grad_fn()->name() == "DivBackward");
  CHECK((a * 2.0).grad_fn()->name() == "MulScalarBackward");
  CHECK(a.sum().grad_fn()->name() == "SumBackward");
  CHECK(a.mean({0}).grad_fn()->name() == "MeanBackward");
  CHECK(a.max().grad_fn()->name() == "MaxBackward");
  CHECK(ls::matmul(a, b).grad_fn()->name() == "MatmulBackward");
  CHECK(a.reshape({4}).grad_fn()->name() == "ReshapeBackward");
  CHECK(a.exp().grad_fn()->name() == "ExpBackward");
  CHECK(a.log_softmax(0).grad_fn()->name() == "LogSoftmaxBackward");
  const ls::Tensor prod = a * b;  // keeps the node alive while its edges are read
  const auto& edges = prod.grad_fn()->next_edges();
  REQUIRE(edges.size() == 2);
  CHECK(edges[0].is_valid());
  CHECK_FALSE(edges[1].is_valid());  // b needs no gradient
}

TEST_CASE("functions: a saved tensor changed in place is detected at backward") {
  ls::Tensor a = ls::randn({3}, ls::requires_grad());
  ls::Tensor b = ls::randn({3});
  ls::Tensor y = (a * b).sum();  // MulBackward saved b
  b.mul_(2.0);
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("MulBackward"), ls::Error);
}

TEST_CASE("functions: saved tensors are freed after backward unless retain_graph") {
  ls::Tensor a = ls::randn({3}, ls::requires_grad());
  ls::Tensor y = a.exp().sum();
  y.backward(ls::Tensor(), /*retain_graph=*/true);
  y.backward();
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("retain_graph"), ls::Error);
}

namespace {
// An identity whose backward is wrong on purpose (doubles the gradient).
struct WrongBackward final : ls::autograd::Node {
  std::string name() const override { return "WrongBackward"; }
  ls::autograd::variable_list apply(ls::autograd::variable_list&& grads) override {
    return {grads[0] * 2.0};
  }
};
ls::Tensor wrong_identity(const ls::Tensor& x) {
  ls::Tensor y = x.detach().clone();
  if (ls::autograd::compute_requires_grad({x})) {
    ls::autograd::record(std::make_shared<WrongBackward>(), {x}, {y});
  }
  return y;
}
}  // namespace

TEST_CASE("gradcheck: reports a wrong formula, wrong dtypes, and passes a right one") {
  ls::manual_seed(70);
  ls::Tensor x = randn64({2, 2});
  ls::testing::GradcheckResult bad =
      ls::testing::gradcheck([](const Inputs& v) { return wrong_identity(v[0]); }, {x});
  CHECK_FALSE(bad.ok);
  CHECK(bad.message.find("input 0") != std::string::npos);
  CHECK(bad.message.find("numerical 1 vs analytical 2") != std::string::npos);
  ls::testing::GradcheckResult f32 = ls::testing::gradcheck(
      [](const Inputs& v) { return v[0] * 2.0; }, {ls::randn({2})});
  CHECK_FALSE(f32.ok);
  CHECK(f32.message.find("float64") != std::string::npos);
  CHECK(ls::testing::gradcheck([](const Inputs& v) { return v[0] * 2.0; }, {x}).ok);
}
