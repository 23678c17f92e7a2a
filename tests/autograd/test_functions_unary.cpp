// tests/autograd/test_functions_unary.cpp — neg, relu, gelu, exp, log, tanh,
// sigmoid, sqrt, rsqrt, abs, pow: gradchecks (kinks avoided, see Note [Kink
// policy] in tests/support/gradcheck.h), the gradient at the kinks, forward values.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/factory.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using ls::testing::away_from_zero;
using ls::testing::randn64;
using Inputs = std::vector<ls::Tensor>;

TEST_CASE("functions: gradcheck of unary ops on all reals") {
  ls::manual_seed(10);
  ls::Tensor x = randn64({2, 3});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].neg(); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].gelu(); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].exp(); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].tanh(); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].sigmoid(); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].pow(2.0); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].pow(3.0); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].pow(1.0); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].pow(0.0); }, {x});
}

TEST_CASE("functions: gradcheck of relu and abs away from their kink at 0") {
  ls::manual_seed(11);
  ls::Tensor x = away_from_zero(randn64({2, 3}));
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].relu(); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].abs(); }, {x});
  // On a non-contiguous input as well.
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].t().relu(); }, {x});
}

TEST_CASE("functions: gradcheck of ops defined for positive inputs") {
  ls::manual_seed(12);
  ls::Tensor x = away_from_zero(randn64({2, 3}), 0.2).abs();
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].log(); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].sqrt(); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].rsqrt(); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].pow(0.5); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].pow(-1.5); }, {x});
}

TEST_CASE("functions: the gradient at a kink is 0, like PyTorch") {
  ls::Tensor x = ls::tensor(std::vector<double>{-1, 0, 2}, {3}, ls::requires_grad());
  x.relu().sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0, 1});
  ls::Tensor y = ls::tensor(std::vector<double>{-1, 0, 2}, {3}, ls::requires_grad());
  y.abs().sum().backward();
  CHECK(y.grad().to_vector<double>() == std::vector<double>{-1, 0, 1});
  ls::Tensor z = ls::tensor(std::vector<double>{0, 3}, {2}, ls::requires_grad());
  z.pow(0.0).sum().backward();  // x^0 == 1: no gradient, not 0 * 0^-1 = NaN
  CHECK(z.grad().to_vector<double>() == std::vector<double>{0, 0});
}

TEST_CASE("functions: unary forward values and gradients by hand") {
  ls::Tensor x = ls::tensor(std::vector<double>{0, 1, 4}, {3}, ls::requires_grad());
  CHECK(x.sqrt().to_vector<double>() == std::vector<double>{0, 1, 2});
  CHECK(x.exp().to_vector<double>()[0] == 1.0);
  CHECK(x.sigmoid().to_vector<double>()[0] == 0.5);
  CHECK(x.tanh().to_vector<double>()[0] == 0.0);
  CHECK(x.gelu().to_vector<double>()[0] == 0.0);
  CHECK(x.pow(2.0).to_vector<double>() == std::vector<double>{0, 1, 16});
  CHECK(x.gelu().to_vector<double>()[1] == doctest::Approx(0.8413447460685429));  // Φ(1)

  x.pow(2.0).sum().backward();  // 2x
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 2, 8});
  x.mutable_grad() = ls::Tensor();
  x.sigmoid().sum().backward();  // σ(0)(1 - σ(0)) = 1/4
  CHECK(x.grad().to_vector<double>()[0] == doctest::Approx(0.25));
  x.mutable_grad() = ls::Tensor();
  x.gelu().sum().backward();  // gelu'(0) = Φ(0) = 1/2
  CHECK(x.grad().to_vector<double>()[0] == doctest::Approx(0.5));
}

TEST_CASE("functions: unary ops in float32 keep float32 gradients") {
  ls::Tensor x = ls::tensor(std::vector<float>{0.5f, 1.0f}, {2}, ls::requires_grad());
  x.log().sum().backward();  // 1/x
  CHECK(x.grad().dtype() == ls::kFloat32);
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2.0f, 1.0f});
}
