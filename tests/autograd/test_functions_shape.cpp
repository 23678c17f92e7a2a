// tests/autograd/test_functions_shape.cpp — contiguous, clone, to, reshape, view,
// transpose, t, permute, (un)squeeze, flatten, expand: gradchecks (also on
// non-contiguous inputs), views share storage, no-op conversions return self.
#include <doctest/doctest.h>

#include <vector>

#include "core/factory.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using ls::testing::randn64;
using Inputs = std::vector<ls::Tensor>;

TEST_CASE("functions: gradcheck of view and reshape ops") {
  ls::manual_seed(50);
  ls::Tensor x = randn64({2, 3, 2});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].reshape({3, -1}); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].view({6, 2}); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].transpose(0, 2); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].transpose(-1, 1); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].permute({2, 0, 1}); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].unsqueeze(1); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].unsqueeze(-1); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].flatten(); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].flatten(1); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].select(0, 1).t(); }, {x});
  ls::Tensor ones_dims = randn64({1, 3, 1});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].squeeze(); }, {ones_dims});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].squeeze(-1); }, {ones_dims});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].squeeze(1); }, {ones_dims});  // size 3: no-op
}

TEST_CASE("functions: gradcheck of shape ops on non-contiguous inputs") {
  ls::manual_seed(51);
  ls::Tensor x = randn64({3, 4});
  // reshape of a transpose must copy; its backward reshapes the gradient back.
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].t().reshape({2, 6}); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].t().flatten(); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].t().contiguous(); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].t().unsqueeze(0).permute({2, 0, 1}); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].narrow(1, 1, 2).t().clone(); }, {x});
}

TEST_CASE("functions: gradcheck of expand sums over the expanded dims") {
  ls::manual_seed(52);
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].expand({2, 3, 4}); }, {randn64({3, 1})});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].expand({3, -1}); }, {randn64({4})});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].expand({2, 2}); }, {randn64({})});
  ls::Tensor x = ls::tensor(std::vector<double>{1, 2}, {2, 1}, ls::requires_grad());
  x.expand({2, 3}).sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 3});
}

TEST_CASE("functions: view ops share storage, no-op conversions return the tensor itself") {
  ls::Tensor x = ls::randn({2, 3}, ls::requires_grad());
  ls::Tensor v = x.view({3, 2});
  CHECK(v.raw_data() == x.raw_data());
  CHECK(v.grad_fn() != nullptr);
  CHECK(x.t().raw_data() == x.raw_data());
  CHECK(x.contiguous().is_same(x));
  CHECK(x.to(ls::kFloat32).is_same(x));
  CHECK(x.to(ls::Device::cpu()).is_same(x));
  CHECK_FALSE(x.clone().raw_data() == x.raw_data());
  ls::Tensor c = x.t().contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.grad_fn()->name() == "CloneBackward");
  CHECK_THROWS_WITH_AS(x.to(ls::Device::cuda(0)), doctest::Contains("no CUDA"), ls::Error);
  CHECK_THROWS_AS(x.view({5}), ls::Error);
  CHECK_THROWS_AS(x.t().view({6}), ls::Error);  // needs a copy: reshape would do it
  CHECK_THROWS_AS(ls::randn({2, 2, 2}).t(), ls::Error);
}

TEST_CASE("functions: to(dtype) converts the gradient back, to(int) ends the graph") {
  ls::Tensor x = ls::tensor(std::vector<float>{1, 2, 3}, {3}, ls::requires_grad());
  ls::Tensor y = x.to(ls::kFloat64);
  CHECK(y.dtype() == ls::kFloat64);
  CHECK(y.grad_fn()->name() == "ToCopyBackward");
  (y * 2.0).sum().backward();
  CHECK(x.grad().dtype() == ls::kFloat32);
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 2, 2});
  ls::Tensor i = x.to(ls::kInt64);
  CHECK_FALSE(i.requires_grad());
  CHECK(i.grad_fn() == nullptr);
  // Through float32 and back: the float32 rounding limits the accuracy.
  CHECK_GRADCHECK([](const Inputs& v) { return (v[0].to(ls::kFloat32) * 3.0).to(ls::kFloat64); },
                  {randn64({2, 2})}, 1e-3, 1e-3, 1e-3);
}
