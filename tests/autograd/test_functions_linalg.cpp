// tests/autograd/test_functions_linalg.cpp — matmul in every shape combination
// (1-d, 2-d, batched, broadcast batch dims, non-contiguous operands) and bmm.
#include <doctest/doctest.h>

#include <tuple>
#include <vector>

#include "core/factory.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using ls::testing::randn64;
using Inputs = std::vector<ls::Tensor>;

TEST_CASE("functions: gradcheck of matmul for every shape combination") {
  ls::manual_seed(40);
  // (shape of a, shape of b, shape of the result)
  const std::vector<std::tuple<ls::IntList, ls::IntList, ls::IntList>> cases = {
      {{3}, {3}, {}},                        // dot
      {{2, 3}, {3, 4}, {2, 4}},              // mm
      {{3}, {3, 4}, {4}},                    // vector x matrix
      {{2, 3}, {3}, {2}},                    // matrix x vector
      {{2, 2, 3}, {3, 4}, {2, 2, 4}},        // batch x matrix (folded fast path)
      {{2, 2, 3}, {3}, {2, 2}},              // batch x vector (folded fast path)
      {{3}, {2, 3, 4}, {2, 4}},              // vector x batch
      {{2, 3}, {2, 3, 4}, {2, 2, 4}},        // matrix x batch (a broadcast)
      {{2, 2, 3}, {2, 3, 4}, {2, 2, 4}},     // batch x batch
      {{2, 1, 2, 3}, {3, 3, 2}, {2, 3, 2, 2}},  // batch dims broadcast on both sides
  };
  for (const auto& [sa, sb, sc] : cases) {
    CAPTURE(ls::shape_str(sa));
    CAPTURE(ls::shape_str(sb));
    ls::Tensor a = randn64(sa), b = randn64(sb);
    CHECK(ls::matmul(a, b).sizes() == sc);
    CHECK_GRADCHECK([](const Inputs& x) { return ls::matmul(x[0], x[1]); }, {a, b});
  }
}

TEST_CASE("functions: matmul on non-contiguous operands, and with one constant operand") {
  ls::manual_seed(41);
  ls::Tensor a = randn64({3, 2}), b = randn64({4, 3});
  CHECK_GRADCHECK([](const Inputs& x) { return x[0].t().matmul(x[1].t()); }, {a, b});
  ls::Tensor batch = randn64({3, 2, 2});
  CHECK_GRADCHECK([](const Inputs& x) { return ls::matmul(x[0].transpose(0, 2), x[1].t()); },
                  {batch, b});
  // Only one operand differentiated: the constant is captured, not an input.
  ls::Tensor w = randn64({3, 4});
  CHECK_GRADCHECK([w](const Inputs& x) { return ls::matmul(x[0], w); }, {randn64({2, 2, 3})});
  CHECK_GRADCHECK([w](const Inputs& x) { return ls::matmul(w.t(), x[0]); }, {randn64({3, 2})});
}

TEST_CASE("functions: gradcheck of bmm") {
  ls::manual_seed(42);
  ls::Tensor a = randn64({2, 2, 3}), b = randn64({2, 3, 4});
  CHECK_GRADCHECK([](const Inputs& x) { return ls::bmm(x[0], x[1]); }, {a, b});
  CHECK_GRADCHECK([](const Inputs& x) { return ls::bmm(x[0], x[1].transpose(1, 2)); },
                  {a, randn64({2, 4, 3})});
}

TEST_CASE("functions: matmul forward values and gradients by hand") {
  ls::Tensor a = ls::tensor(std::vector<double>{1, 2, 3, 4}, {2, 2}, ls::requires_grad());
  ls::Tensor b = ls::tensor(std::vector<double>{5, 6, 7, 8}, {2, 2}, ls::requires_grad());
  ls::Tensor c = ls::matmul(a, b);
  CHECK(c.to_vector<double>() == std::vector<double>{19, 22, 43, 50});
  c.sum().backward();
  // dA = ones @ B^T: row sums of B; dB = A^T @ ones: column sums of A.
  CHECK(a.grad().to_vector<double>() == std::vector<double>{11, 15, 11, 15});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{4, 4, 6, 6});
  ls::Tensor v = ls::tensor(std::vector<double>{1, 2}, {2});
  CHECK(ls::matmul(v, v).item<double>() == 5);
}

TEST_CASE("functions: matmul in float32 gives float32 gradients") {
  ls::manual_seed(43);
  ls::Tensor a = ls::randn({4, 2, 3}, ls::requires_grad());
  ls::Tensor b = ls::randn({3, 5}, ls::requires_grad());
  ls::matmul(a, b).sum().backward();
  CHECK(a.grad().dtype() == ls::kFloat32);
  CHECK(a.grad().sizes() == a.sizes());
  CHECK(b.grad().sizes() == b.sizes());
  // The same in float64, for comparison.
  ls::Tensor a64 = a.detach().to(ls::kFloat64), b64 = b.detach().to(ls::kFloat64);
  a64.requires_grad_(true);
  b64.requires_grad_(true);
  ls::matmul(a64, b64).sum().backward();
  CHECK(ls::allclose(b.grad().to(ls::kFloat64), b64.grad(), 1e-5, 1e-5));
  CHECK(ls::allclose(a.grad().to(ls::kFloat64), a64.grad(), 1e-5, 1e-5));
}
