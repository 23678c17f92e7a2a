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
using ls::testing::randn64;
using Inputs = std::vector<ls::Tensor>;

namespace {
ls::Tensor f64(const std::vector<double>& v, const ls::IntList& sizes) {
  return ls::tensor(v, sizes);
}
// b with |a - b| >= 0.1 everywhere (no ties for maximum/minimum; see Note [Kink policy]).
ls::Tensor apart_from(const ls::Tensor& a, const ls::IntList& sizes) {
  ls::Tensor d = away_from_zero(randn64(sizes));
  return (a.detach().expand(ls::broadcast_shapes(a.sizes(), sizes, "test")) + d.expand(
              ls::broadcast_shapes(a.sizes(), sizes, "test")))
      .sum_to_size_for_test(sizes);
}
}  // namespace
