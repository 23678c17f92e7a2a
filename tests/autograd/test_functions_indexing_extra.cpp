// tests/autograd/test_functions_indexing_extra.cpp — libtorch's spellings added
// for the libtorch frontend: gather, scatter, masked_fill, tril, triu, slice, operator[],
// sin, cos (values by hand, as torch computes them; gradchecks), new_zeros and
// friends, uniform_ / normal_, const in-place ops on p.grad(), untyped item(),
// kCPU, and the free functions of core/tensor_functions.h.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "core/tensor_functions.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using ls::testing::randn64;
using Inputs = std::vector<ls::Tensor>;

namespace {
ls::Tensor i64(std::vector<int64_t> v, ls::IntList sizes) { return ls::tensor(v, sizes); }
ls::Tensor f32(std::vector<float> v, ls::IntList sizes) { return ls::tensor(v, sizes); }
}  // namespace

TEST_CASE("gather and scatter: values along dim 0 and 1") {
  ls::Tensor x = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  // torch.gather(x, 1, [[2, 0], [1, 1]]) = [[3, 1], [5, 5]]
  CHECK(x.gather(1, i64({2, 0, 1, 1}, {2, 2})).to_vector<float>() == std::vector<float>{3, 1, 5, 5});
  // torch.gather(x, 0, [[1, 0, 1]]) = [[4, 2, 6]]
  CHECK(x.gather(0, i64({1, 0, 1}, {1, 3})).to_vector<float>() == std::vector<float>{4, 2, 6});
  // x.scatter(1, [[0], [2]], [[9], [8]]) = [[9, 2, 3], [4, 5, 8]]
  ls::Tensor s = x.scatter(1, i64({0, 2}, {2, 1}), f32({9, 8}, {2, 1}));
  CHECK(s.to_vector<float>() == std::vector<float>{9, 2, 3, 4, 5, 8});
  CHECK(x.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});  // out of place
  CHECK_THROWS_WITH_AS(x.gather(1, i64({3}, {1, 1})), doctest::Contains("out of range"), ls::Error);
  CHECK_THROWS_WITH_AS(x.gather(1, i64({0}, {1})), doctest::Contains("as many dims"), ls::Error);
  CHECK_THROWS_WITH_AS(x.gather(1, f32({0}, {1, 1})), doctest::Contains("int64"), ls::Error);
}

TEST_CASE("gather and scatter: gradchecks, a repeated index sums its gradient") {
  ls::manual_seed(31);
  ls::Tensor x = randn64({3, 4});
  ls::Tensor idx = i64({0, 2, 2, 1, 0, 0, 1, 1}, {2, 4});
  CHECK_GRADCHECK([&](const Inputs& v) { return v[0].gather(0, idx); }, {x});
  CHECK_GRADCHECK([&](const Inputs& v) { return v[0].t().gather(1, idx.t().contiguous()); }, {x});
  ls::Tensor sidx = i64({0, 1, 2, 0, 2, 0, 1, 1}, {2, 4});  // distinct targets per column
  ls::Tensor src = randn64({2, 4});
  CHECK_GRADCHECK([&](const Inputs& v) { return v[0].scatter(0, sidx, v[1]); }, {x, src});
  ls::Tensor bigger = randn64({3, 5});  // src larger than index: its extra elements get no gradient
  CHECK_GRADCHECK([&](const Inputs& v) { return v[0].scatter(0, sidx, v[1]); }, {x, bigger});
  ls::Tensor w = ls::ones({3}, ls::requires_grad());
  w.gather(0, i64({1, 1, 2}, {3})).sum().backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{0, 2, 1});
}

TEST_CASE("masked_fill, tril, triu: values and gradients") {
  ls::Tensor x = f32({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  CHECK(x.tril().to_vector<float>() == std::vector<float>{1, 0, 0, 4, 5, 0, 7, 8, 9});
  CHECK(x.triu().to_vector<float>() == std::vector<float>{1, 2, 3, 0, 5, 6, 0, 0, 9});
  CHECK(x.triu(1).to_vector<float>() == std::vector<float>{0, 2, 3, 0, 0, 6, 0, 0, 0});
  CHECK(x.tril(-1).to_vector<float>() == std::vector<float>{0, 0, 0, 4, 0, 0, 7, 8, 0});
  ls::Tensor r = f32({1, 2, 3, 4, 5, 6}, {2, 3});  // non-square, and batched below
  CHECK(r.tril().to_vector<float>() == std::vector<float>{1, 0, 0, 4, 5, 0});
  CHECK(ls::stack({r, r}).triu(1).select(0, 1).to_vector<float>() == std::vector<float>{0, 2, 3, 0, 0, 6});
  ls::Tensor m = x.gt(5.0);
  CHECK(x.masked_fill(m, -1.0).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, -1, -1, -1, -1});
  CHECK(x.masked_fill(m.select(0, 2), 0.0).to_vector<float>() ==  // a broadcast (3) mask
        std::vector<float>{0, 0, 0, 0, 0, 0, 0, 0, 0});
  CHECK_THROWS_WITH_AS(x.masked_fill(x, 0.0), doctest::Contains("bool"), ls::Error);
  CHECK_THROWS_WITH_AS(ls::ones({3}).tril(), doctest::Contains("at least 2 dims"), ls::Error);
  ls::manual_seed(32);
  ls::Tensor a = randn64({3, 4});
  ls::Tensor mask = a.gt(0.0);
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].tril(); }, {a});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].triu(-1); }, {a});
  CHECK_GRADCHECK([&](const Inputs& v) { return v[0].masked_fill(mask, 2.5); }, {a});
}

TEST_CASE("slice and operator[]: Python's bounds, views for step 1, copies for larger steps") {
  ls::Tensor x = ls::arange(10);
  CHECK(x.slice(0, 2, 5).to_vector<int64_t>() == std::vector<int64_t>{2, 3, 4});
  CHECK(x.slice(0, -3).to_vector<int64_t>() == std::vector<int64_t>{7, 8, 9});
  CHECK(x.slice(0, 1, 100, 3).to_vector<int64_t>() == std::vector<int64_t>{1, 4, 7});
  CHECK(x.slice(0, 8, 2).numel() == 0);
  CHECK(x.slice(0, 2, 5).storage_offset() == 2);  // a view
  CHECK_THROWS_WITH_AS(x.slice(0, 0, 5, 0), doctest::Contains("step must be positive"), ls::Error);
  ls::Tensor m = ls::arange(6).reshape({2, 3});
  CHECK(m[1].to_vector<int64_t>() == std::vector<int64_t>{3, 4, 5});
  CHECK(m[1][2].item<int64_t>() == 5);
  CHECK(m[-1][0].item() == 3.0);  // untyped item(): a double
  ls::manual_seed(33);
  ls::Tensor a = randn64({4, 3});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].slice(0, 1, 4, 2); }, {a});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0][2]; }, {a});
}

TEST_CASE("sin and cos: values and gradchecks") {
  ls::Tensor x = ls::tensor(std::vector<double>{0.0, 0.5, -1.25, 3.0}, {4});
  std::vector<double> s = x.sin().to_vector<double>(), c = x.cos().to_vector<double>();
  const std::vector<double> xs = x.to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) {
    CHECK(s[i] == std::sin(xs[i]));
    CHECK(c[i] == std::cos(xs[i]));
  }
  ls::manual_seed(34);
  ls::Tensor a = randn64({2, 3});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].sin(); }, {a});
  CHECK_GRADCHECK([](const Inputs& v) { return ls::cos(v[0]); }, {a});
  CHECK_THROWS_WITH_AS(ls::arange(3).sin(), doctest::Contains("float"), ls::Error);
}

TEST_CASE("new_zeros, new_ones, new_full, new_empty keep dtype and device, not requires_grad") {
  ls::Tensor p = ls::ones({2}, ls::TensorOptions().dtype(ls::kFloat64).requires_grad(true));
  ls::Tensor z = p.new_zeros({3, 2});
  CHECK(z.dtype() == ls::kFloat64);
  CHECK(z.sizes() == ls::IntList{3, 2});
  CHECK_FALSE(z.requires_grad());
  CHECK(z.sum().item() == 0.0);
  CHECK(p.new_ones({2}).to_vector<double>() == std::vector<double>{1, 1});
  CHECK(p.new_full({2}, 7.5).to_vector<double>() == std::vector<double>{7.5, 7.5});
  CHECK(ls::arange(2).new_empty({4}).dtype() == ls::kInt64);
  CHECK(p.to(ls::kCPU).device() == ls::Device(ls::kCPU));
}

TEST_CASE("uniform_ and normal_ draw from the default generator, in place") {
  ls::manual_seed(35);
  ls::Tensor u = ls::empty({2000});
  u.uniform_(-2.0, 3.0);
  const std::vector<float> v = u.to_vector<float>();
  for (float e : v) {
    CHECK(e >= -2.0f);
    CHECK(e < 3.0f);
  }
  CHECK(std::abs(u.mean().item() - 0.5) < 0.15);  // the mean's std is 0.032
  ls::Tensor n = ls::empty({4000}, ls::TensorOptions().dtype(ls::kFloat64));
  n.normal_(1.0, 2.0);
  CHECK(std::abs(n.mean().item() - 1.0) < 0.15);                        // std 0.032
  CHECK(std::abs((n - 1.0).pow(2.0).mean().sqrt().item() - 2.0) < 0.15);  // std 0.022
  // The same seed gives the same numbers.
  ls::manual_seed(35);
  ls::Tensor again = ls::empty({2000});
  again.uniform_(-2.0, 3.0);
  CHECK(again.to_vector<float>() == v);
  ls::Tensor ints = ls::arange(3);
  CHECK_THROWS_WITH_AS(ints.uniform_(), doctest::Contains("floating point"), ls::Error);
}

TEST_CASE("const in-place ops: p.grad().zero_() and friends compile and write through the handle") {
  ls::Tensor p = ls::ones({3}, ls::requires_grad());
  (p * 2.0).sum().backward();
  const ls::Tensor& g = p.grad();
  g.mul_(0.5);
  CHECK(p.grad().to_vector<float>() == std::vector<float>{1, 1, 1});
  p.grad().add_(1.0);
  p.grad().div_(2.0);
  CHECK(p.grad().to_vector<float>() == std::vector<float>{1, 1, 1});
  p.grad().zero_();
  CHECK(p.grad().to_vector<float>() == std::vector<float>{0, 0, 0});
  p.grad().fill_(4.0);
  p.grad().sub_(ls::ones({3}));
  CHECK(p.grad().to_vector<float>() == std::vector<float>{3, 3, 3});
}

TEST_CASE("free functions: ls::relu, ls::log_softmax, ls::sum, ls::max_pool2d(x, 2)") {
  ls::Tensor x = ls::tensor(std::vector<float>{-1, 2, -3, 4}, {1, 1, 2, 2});
  CHECK(ls::relu(x).to_vector<float>() == std::vector<float>{0, 2, 0, 4});
  CHECK(ls::sum(x).item() == 2.0);
  CHECK(ls::max_pool2d(x, 2).to_vector<float>() == std::vector<float>{4});
  CHECK(ls::allclose(ls::log_softmax(x.reshape({2, 2}), 1), x.reshape({2, 2}).log_softmax(1)));
}
