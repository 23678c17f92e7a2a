// tests/autograd/test_functions_indexing.cpp — narrow, select, index_select, cat,
// stack: gradchecks, repeated indices accumulating, pieces of different sizes,
// inputs that do not require grad, mixed dtypes.
#include <doctest/doctest.h>

#include <vector>

#include "core/factory.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using ls::testing::randn64;
using Inputs = std::vector<ls::Tensor>;

TEST_CASE("functions: gradcheck of narrow and select") {
  ls::manual_seed(60);
  ls::Tensor x = randn64({3, 4});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].narrow(1, 1, 2); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].narrow(0, -2, 2); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].narrow(-1, 0, 4); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].select(0, 1); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].select(1, -1); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].t().select(0, 2); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].select(0, 0).select(0, 3); }, {x});
}

TEST_CASE("functions: index_select, with repeated indices accumulating their gradients") {
  ls::manual_seed(61);
  ls::Tensor x = randn64({3, 4});
  ls::Tensor idx = ls::tensor(std::vector<int64_t>{2, 0, 2, 2}, {4});
  CHECK_GRADCHECK([idx](const Inputs& v) { return v[0].index_select(0, idx); }, {x});
  CHECK_GRADCHECK([idx](const Inputs& v) { return v[0].index_select(1, idx); }, {x});
  CHECK_GRADCHECK([idx](const Inputs& v) { return v[0].t().index_select(0, idx); }, {x});
  ls::Tensor i32 = ls::tensor(std::vector<int32_t>{1, 1}, {2});
  CHECK_GRADCHECK([i32](const Inputs& v) { return v[0].index_select(-1, i32); }, {x});

  ls::Tensor w = ls::tensor(std::vector<double>{10, 20, 30}, {3}, ls::requires_grad());
  ls::Tensor picked = w.index_select(0, idx);
  CHECK(picked.to_vector<double>() == std::vector<double>{30, 10, 30, 30});
  picked.sum().backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1, 0, 3});
}

TEST_CASE("functions: cat of pieces of different sizes") {
  ls::manual_seed(62);
  ls::Tensor a = randn64({2, 3}), b = randn64({1, 3}), c = randn64({4, 3});
  CHECK_GRADCHECK([](const Inputs& v) { return ls::cat({v[0], v[1], v[2]}, 0); }, {a, b, c});
  ls::Tensor d = randn64({2, 1}), e = randn64({2, 2});
  CHECK_GRADCHECK([](const Inputs& v) { return ls::cat({v[0], v[1], v[2]}, -1); }, {a, d, e});
  // A piece that is a non-contiguous view, and the same tensor twice.
  CHECK_GRADCHECK([](const Inputs& v) { return ls::cat({v[0].t(), v[0].t()}, 1); }, {a});

  ls::Tensor p = ls::tensor(std::vector<double>{1, 2}, {2}, ls::requires_grad());
  ls::Tensor q = ls::tensor(std::vector<double>{3}, {1});  // constant
  ls::Tensor r = ls::tensor(std::vector<float>{4, 5}, {2}, ls::requires_grad());
  ls::Tensor out = ls::cat({p, q, r});
  CHECK(out.dtype() == ls::kFloat64);
  CHECK(out.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5});
  (out * ls::tensor(std::vector<double>{1, 2, 3, 4, 5}, {5})).sum().backward();
  CHECK(p.grad().to_vector<double>() == std::vector<double>{1, 2});
  CHECK_FALSE(q.grad().defined());
  CHECK(r.grad().dtype() == ls::kFloat32);
  CHECK(r.grad().to_vector<float>() == std::vector<float>{4, 5});
}

TEST_CASE("functions: stack along every dim") {
  ls::manual_seed(63);
  ls::Tensor a = randn64({2, 3}), b = randn64({2, 3});
  for (int64_t dim : {0, 1, 2, -1}) {
    CAPTURE(dim);
    CHECK_GRADCHECK([=](const Inputs& v) { return ls::stack({v[0], v[1]}, dim); }, {a, b});
  }
  ls::Tensor s = ls::stack({ls::tensor(std::vector<double>{1, 2}, {2}),
                            ls::tensor(std::vector<double>{3, 4}, {2})},
                           1);
  CHECK(s.sizes() == ls::IntList{2, 2});
  CHECK(s.to_vector<double>() == std::vector<double>{1, 3, 2, 4});
  CHECK_THROWS_WITH_AS(ls::stack({a, randn64({3, 2})}), doctest::Contains("same shape"),
                       ls::Error);
}
