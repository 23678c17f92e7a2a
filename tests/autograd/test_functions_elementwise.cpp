// tests/autograd/test_functions_elementwise.cpp — + - * / (tensor and scalar),
// unary minus, where, maximum, minimum: gradchecks with broadcasting, forward
// values, ties, mixed dtypes.
#include <doctest/doctest.h>

#include <vector>

#include "core/factory.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using ls::testing::away_from_zero;
using ls::testing::distinct_values;
using ls::testing::randn64;
using Inputs = std::vector<ls::Tensor>;

namespace {
ls::Tensor f64(const std::vector<double>& v, const ls::IntList& sizes) {
  return ls::tensor(v, sizes);
}
}  // namespace

TEST_CASE("functions: + - * / of tensors, same shape and broadcast") {
  ls::manual_seed(0);
  // (shape of a, shape of b): same, row broadcast, outer-product broadcast, 0-d.
  const std::vector<std::pair<ls::IntList, ls::IntList>> shapes = {
      {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{2, 1}, {1, 3}}, {{}, {2, 3}}, {{2, 3}, {}}, {{}, {}}};
  for (const auto& [sa, sb] : shapes) {
    CAPTURE(ls::shape_str(sa));
    CAPTURE(ls::shape_str(sb));
    ls::Tensor a = randn64(sa);
    ls::Tensor b = away_from_zero(randn64(sb), 0.5);  // divisor away from 0
    CHECK_GRADCHECK([](const Inputs& x) { return x[0] + x[1]; }, {a, b});
    CHECK_GRADCHECK([](const Inputs& x) { return x[0] - x[1]; }, {a, b});
    CHECK_GRADCHECK([](const Inputs& x) { return x[0] * x[1]; }, {a, b});
    CHECK_GRADCHECK([](const Inputs& x) { return x[0] / x[1]; }, {a, b});
  }
}

TEST_CASE("functions: a tensor used as both operands") {
  ls::manual_seed(1);
  ls::Tensor a = away_from_zero(randn64({2, 3}), 0.5);
  CHECK_GRADCHECK([](const Inputs& x) { return x[0] * x[0]; }, {a});
  CHECK_GRADCHECK([](const Inputs& x) { return x[0] / x[0] + x[0] - x[0]; }, {a});
}

TEST_CASE("functions: tensor-scalar and scalar-tensor arithmetic, unary minus") {
  ls::manual_seed(2);
  ls::Tensor a = away_from_zero(randn64({2, 3}), 0.5);
  CHECK_GRADCHECK([](const Inputs& x) { return x[0] + 2.0; }, {a});
  CHECK_GRADCHECK([](const Inputs& x) { return x[0] - 2.0; }, {a});
  CHECK_GRADCHECK([](const Inputs& x) { return x[0] * 3.0; }, {a});
  CHECK_GRADCHECK([](const Inputs& x) { return x[0] / 4.0; }, {a});
  CHECK_GRADCHECK([](const Inputs& x) { return 2.0 + x[0]; }, {a});
  CHECK_GRADCHECK([](const Inputs& x) { return 2.0 - x[0]; }, {a});
  CHECK_GRADCHECK([](const Inputs& x) { return 3.0 * x[0]; }, {a});
  CHECK_GRADCHECK([](const Inputs& x) { return 4.0 / x[0]; }, {a});
  CHECK_GRADCHECK([](const Inputs& x) { return -x[0]; }, {a});
}

TEST_CASE("functions: elementwise forward values") {
  ls::Tensor a = f64({1, 2, 3}, {3});
  ls::Tensor b = f64({4, 5, 6}, {3});
  CHECK((a * b).to_vector<double>() == std::vector<double>{4, 10, 18});
  CHECK((b - a).to_vector<double>() == std::vector<double>{3, 3, 3});
  CHECK((b / a).to_vector<double>() == std::vector<double>{4, 2.5, 2});
  CHECK((6.0 / a).to_vector<double>() == std::vector<double>{6, 3, 2});
  CHECK((1.0 - a).to_vector<double>() == std::vector<double>{0, -1, -2});
  ls::Tensor col = f64({10, 20}, {2, 1});
  ls::Tensor sum = col + a.reshape({1, 3});  // (2, 1) + (1, 3) -> (2, 3)
  CHECK(sum.sizes() == ls::IntList{2, 3});
  CHECK(sum.to_vector<double>() == std::vector<double>{11, 12, 13, 21, 22, 23});
  CHECK((-a).to_vector<double>() == std::vector<double>{-1, -2, -3});
}

TEST_CASE("functions: broadcast gradients are summed over the broadcast dims") {
  ls::Tensor a = ls::ones({2, 3}, ls::TensorOptions().dtype(ls::kFloat64).requires_grad(true));
  ls::Tensor b = ls::tensor(std::vector<double>{1, 2, 3}, {3}, ls::requires_grad());
  (a * b).sum().backward();
  CHECK(b.grad().sizes() == ls::IntList{3});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{2, 2, 2});  // two rows of a
  CHECK(a.grad().to_vector<double>() == std::vector<double>{1, 2, 3, 1, 2, 3});
}

TEST_CASE("functions: maximum and minimum (away from ties), and ties split the gradient") {
  // a holds odd multiples of 0.1, b even ones, so |a - b| >= 0.1: no ties.
  ls::manual_seed(3);
  ls::Tensor a = distinct_values({2, 3}, 0.2);
  ls::Tensor b = f64({-0.4, 0.0, 0.4}, {3});
  CHECK_GRADCHECK([](const Inputs& x) { return ls::maximum(x[0], x[1]); }, {a, b});
  CHECK_GRADCHECK([](const Inputs& x) { return ls::minimum(x[0], x[1]); }, {a, b});
  CHECK_GRADCHECK([](const Inputs& x) { return ls::maximum(x[1], x[0]); }, {a, b});

  CHECK(ls::maximum(f64({1, 5}, {2}), f64({3, 2}, {2})).to_vector<double>() ==
        std::vector<double>{3, 5});
  CHECK(ls::minimum(f64({1, 5}, {2}), f64({3, 2}, {2})).to_vector<double>() ==
        std::vector<double>{1, 2});

  // At a tie each side gets half, as in PyTorch.
  ls::Tensor p = ls::tensor(std::vector<double>{1, 2, 3}, {3}, ls::requires_grad());
  ls::Tensor q = ls::tensor(std::vector<double>{1, 0, 4}, {3}, ls::requires_grad());
  ls::maximum(p, q).sum().backward();
  CHECK(p.grad().to_vector<double>() == std::vector<double>{0.5, 1, 0});
  CHECK(q.grad().to_vector<double>() == std::vector<double>{0.5, 0, 1});
}

TEST_CASE("functions: where with broadcasting") {
  ls::manual_seed(4);
  ls::Tensor cond = f64({1, -1, 1, -1, -1, 1}, {2, 3}).gt(0.0);
  ls::Tensor a = randn64({2, 3});
  ls::Tensor b = randn64({3});
  CHECK_GRADCHECK([cond](const Inputs& x) { return ls::where(cond, x[0], x[1]); }, {a, b});
  ls::Tensor s = randn64({});
  CHECK_GRADCHECK([cond](const Inputs& x) { return ls::where(cond, x[0], x[1]); }, {s, b});
  ls::Tensor out = ls::where(cond, f64({1, 2, 3, 4, 5, 6}, {2, 3}), f64({0, 0, 0}, {3}));
  CHECK(out.to_vector<double>() == std::vector<double>{1, 0, 3, 0, 0, 6});
}

TEST_CASE("functions: mixed dtypes promote forward and convert gradients back") {
  ls::Tensor a = ls::tensor(std::vector<float>{1, 2, 3}, {3}, ls::requires_grad());
  ls::Tensor b = ls::tensor(std::vector<double>{4, 5, 6}, {3}, ls::requires_grad());
  ls::Tensor c = a * b;
  CHECK(c.dtype() == ls::kFloat64);
  c.sum().backward();
  CHECK(a.grad().dtype() == ls::kFloat32);
  CHECK(a.grad().to_vector<float>() == std::vector<float>{4, 5, 6});
  CHECK(b.grad().dtype() == ls::kFloat64);
  CHECK(b.grad().to_vector<double>() == std::vector<double>{1, 2, 3});

  // A float tensor times an integer tensor: only the float one gets a gradient.
  ls::Tensor w = ls::tensor(std::vector<double>{1, 2}, {2}, ls::requires_grad());
  ls::Tensor k = ls::tensor(std::vector<int64_t>{3, 4}, {2});
  CHECK_GRADCHECK([k](const Inputs& x) { return x[0] * k + k / x[0]; }, {w.detach()});
  (w * k).sum().backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{3, 4});
}
