// tests/autograd/test_functions_nn.cpp — gradchecks of the transformer-side ops of
// core/nn_ops.h: linear, layer_norm, embedding, dropout, cross_entropy, mse_loss.
//
// Every floating input is checked against central differences (f64). Where an op's
// gradient is defined rather than derived (embedding's padding_idx row is zero by
// definition; dropout's mask is random) the test pins it down directly: the
// padding row gets exactly zero, and with a fixed seed dropout's gradient is the
// mask / (1 - p).
// Read before: tests/support/gradcheck.h, autograd/functions/linear.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/factory.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
using ls::testing::randn64;
using Inputs = std::vector<ls::Tensor>;

TEST_CASE("functions: gradcheck of linear with and without bias, 2-d and 3-d input") {
  ls::manual_seed(40);
  ls::Tensor w = randn64({2, 4});
  ls::Tensor b = randn64({2});
  for (const ls::IntList& sizes : {ls::IntList{3, 4}, ls::IntList{2, 3, 4}, ls::IntList{4}}) {
    CAPTURE(ls::shape_str(sizes));
    ls::Tensor x = randn64(sizes);
    CHECK_GRADCHECK([](const Inputs& v) { return ls::linear(v[0], v[1], v[2]); }, {x, w, b});
    CHECK_GRADCHECK([](const Inputs& v) { return ls::linear(v[0], v[1], ls::Tensor()); }, {x, w});
  }
  // A transposed (non-contiguous) input goes through the view's backward too.
  ls::Tensor xt = randn64({4, 3});
  CHECK_GRADCHECK([](const Inputs& v) { return ls::linear(v[0].t(), v[1], v[2]); }, {xt, w, b});
}

TEST_CASE("functions: linear records one LinearBackward and skips constant inputs") {
  ls::manual_seed(41);
  ls::Tensor x = ls::randn({3, 4});
  ls::Tensor w = ls::randn({2, 4}, ls::requires_grad());
  ls::Tensor b = ls::randn({2}, ls::requires_grad());
  ls::Tensor y = ls::linear(x, w, b);
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name() == "LinearBackward");
  y.sum().backward();
  CHECK_FALSE(x.grad().defined());
  CHECK(w.grad().sizes() == ls::IntList{2, 4});
  // d sum(y) / db = number of rows.
  for (float g : b.grad().to_vector<float>()) CHECK(g == doctest::Approx(3.0));
}

TEST_CASE("functions: gradcheck of layer_norm over 1 and 2 trailing dims") {
  ls::manual_seed(42);
  ls::Tensor x = randn64({2, 3, 4});
  for (const ls::IntList& norm : {ls::IntList{4}, ls::IntList{3, 4}}) {
    CAPTURE(ls::shape_str(norm));
    ls::Tensor w = randn64(norm);
    ls::Tensor b = randn64(norm);
    CHECK_GRADCHECK([=](const Inputs& v) { return ls::layer_norm(v[0], norm, v[1], v[2]); },
                    {x, w, b});
    CHECK_GRADCHECK(
        [=](const Inputs& v) { return ls::layer_norm(v[0], norm, ls::Tensor(), ls::Tensor()); },
        {x});
    CHECK_GRADCHECK([=](const Inputs& v) { return ls::layer_norm(v[0], norm, v[1], ls::Tensor()); },
                    {x, w});
  }
  ls::Tensor xt = randn64({4, 3});  // normalise the rows of a transposed view
  ls::Tensor w3 = randn64({4});
  CHECK_GRADCHECK([](const Inputs& v) { return ls::layer_norm(v[0].t(), {4}, v[1], ls::Tensor()); },
                  {xt, w3});
}

TEST_CASE("functions: gradcheck of embedding with repeated indices") {
  ls::manual_seed(43);
  ls::Tensor w = randn64({5, 3});
  ls::Tensor idx = ls::tensor(std::vector<int64_t>{1, 3, 1, 4, 0, 1}, {2, 3});
  CHECK_GRADCHECK([](const Inputs& v) { return ls::embedding(v[0], v[1]); }, {w, idx});
  ls::Tensor idx32 = ls::tensor(std::vector<int32_t>{2, 2, 0});
  CHECK_GRADCHECK([](const Inputs& v) { return ls::embedding(v[0], v[1]); }, {w, idx32});
}

TEST_CASE("functions: embedding gives the padding_idx row exactly zero gradient") {
  ls::manual_seed(44);
  ls::Tensor w = ls::randn({4, 2}, ls::requires_grad());
  ls::Tensor idx = ls::tensor(std::vector<int64_t>{2, 0, 2, 3, 2});
  ls::Tensor y = ls::embedding(w, idx, /*padding_idx=*/2);  // (5, 2)
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name() == "EmbeddingBackward");
  // The padding row is still looked up: the forward is a plain gather.
  CHECK(y.select(0, 0).to_vector<float>() == w.select(0, 2).to_vector<float>());
  y.sum().backward();
  // Row counts: 0 once, 1 never, 2 three times (padding), 3 once.
  CHECK(w.grad().to_vector<float>() == std::vector<float>{1, 1, 0, 0, 0, 0, 1, 1});
}

TEST_CASE("functions: gradcheck of dropout with a fixed seed, its gradient is mask / (1 - p)") {
  const double p = 0.4;
  ls::Tensor x = randn64({3, 5});
  // Reseeding inside fn makes every call draw the same mask, so fn is a fixed
  // linear map and central differences are exact.
  CHECK_GRADCHECK(
      [=](const Inputs& v) {
        ls::manual_seed(45);
        return ls::dropout(v[0], p, /*training=*/true);
      },
      {x});
  // With x = 1 the output is the scaled mask itself, and so is the gradient of sum(y).
  ls::manual_seed(46);
  ls::Tensor ones = ls::ones({40}, ls::TensorOptions().dtype(ls::kFloat64).requires_grad(true));
  ls::Tensor y = ls::dropout(ones, p, true);
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name() == "DropoutBackward");
  y.sum().backward();
  const std::vector<double> yv = y.to_vector<double>(), gv = ones.grad().to_vector<double>();
  int kept = 0;
  for (size_t i = 0; i < yv.size(); ++i) {
    CHECK((yv[i] == 0.0 || yv[i] == doctest::Approx(1.0 / (1 - p))));
    CHECK(gv[i] == yv[i]);
    kept += yv[i] != 0.0;
  }
  CHECK(kept > 0);
  CHECK(kept < 40);
}

TEST_CASE("functions: dropout is the identity in eval mode and for p == 0") {
  ls::Tensor x = ls::randn({4}, ls::requires_grad());
  CHECK(ls::dropout(x, 0.5, /*training=*/false).is_same(x));
  CHECK(ls::dropout(x, 0.0, /*training=*/true).is_same(x));
  CHECK_THROWS_WITH_AS(ls::dropout(x, 2.0, false),
                       doctest::Contains("dropout probability has to be between 0 and 1"),
                       ls::Error);
}

TEST_CASE("functions: gradcheck of cross_entropy with some targets ignored") {
  ls::manual_seed(47);
  ls::Tensor logits = randn64({5, 4});
  ls::Tensor target = ls::tensor(std::vector<int64_t>{3, -100, 0, 0, -100});
  CHECK_GRADCHECK([](const Inputs& v) { return ls::cross_entropy(v[0], v[1]); }, {logits, target});
  ls::Tensor target2 = ls::tensor(std::vector<int64_t>{1, 2, 9, 3, 9});
  CHECK_GRADCHECK([](const Inputs& v) { return ls::cross_entropy(v[0], v[1], 9); },
                  {logits, target2});
  // Composes with other ops: the loss of a linear layer.
  ls::Tensor w = randn64({4, 3});
  ls::Tensor x = randn64({5, 3});
  CHECK_GRADCHECK(
      [](const Inputs& v) { return ls::cross_entropy(ls::linear(v[0], v[1], ls::Tensor()), v[2]); },
      {x, w, target});
}

TEST_CASE("functions: cross_entropy with every target ignored is NaN with zero gradient") {
  ls::Tensor logits = ls::randn({2, 3}, ls::requires_grad());
  ls::Tensor loss = ls::cross_entropy(logits, ls::full({2}, -100, ls::kInt64));
  CHECK(std::isnan(loss.item<double>()));
  loss.backward();
  for (float g : logits.grad().to_vector<float>()) CHECK(g == 0.0f);
}

TEST_CASE("functions: gradcheck of mse_loss w.r.t. input and target") {
  ls::manual_seed(48);
  ls::Tensor x = randn64({3, 4});
  ls::Tensor y = randn64({3, 4});
  CHECK_GRADCHECK([](const Inputs& v) { return ls::mse_loss(v[0], v[1]); }, {x, y});
  CHECK_GRADCHECK([](const Inputs& v) { return ls::mse_loss(v[0].t(), v[1].t()); }, {x, y});
}
