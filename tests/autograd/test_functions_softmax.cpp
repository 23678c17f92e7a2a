// tests/autograd/test_functions_softmax.cpp — softmax and log_softmax: gradchecks
// along every dim (negative dims, non-contiguous input) and forward values.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/factory.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using ls::testing::randn64;
using Inputs = std::vector<ls::Tensor>;

TEST_CASE("functions: gradcheck of softmax and log_softmax") {
  ls::manual_seed(30);
  ls::Tensor x = randn64({3, 4});
  for (int64_t dim : {0, 1, -1}) {
    CAPTURE(dim);
    CHECK_GRADCHECK([=](const Inputs& v) { return v[0].softmax(dim); }, {x});
    CHECK_GRADCHECK([=](const Inputs& v) { return v[0].log_softmax(dim); }, {x});
  }
  ls::Tensor y = randn64({2, 3, 2});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].softmax(1); }, {y});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].log_softmax(1); }, {y});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].transpose(0, 2).softmax(-1); }, {y});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].transpose(0, 2).log_softmax(0); }, {y});
}

TEST_CASE("functions: softmax and log_softmax forward values") {
  ls::Tensor x = ls::tensor(std::vector<double>{0, std::log(2.0), 5, 5}, {2, 2});
  std::vector<double> p = x.softmax(1).to_vector<double>();
  CHECK(p[0] == doctest::Approx(1.0 / 3));
  CHECK(p[1] == doctest::Approx(2.0 / 3));
  CHECK(p[2] == doctest::Approx(0.5));
  CHECK(p[3] == doctest::Approx(0.5));
  std::vector<double> lp = x.log_softmax(1).to_vector<double>();
  CHECK(lp[0] == doctest::Approx(std::log(1.0 / 3)));
  CHECK(lp[3] == doctest::Approx(std::log(0.5)));
  // The gradient of sum(softmax) is zero: the outputs always sum to 1.
  ls::Tensor w = randn64({2, 3});
  w.requires_grad_(true);
  w.softmax(1).sum().backward();
  for (double g : w.grad().to_vector<double>()) CHECK(g == doctest::Approx(0.0).epsilon(1e-12));
}
