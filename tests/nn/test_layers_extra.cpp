// tests/nn/test_layers_extra.cpp — the layers added for libtorch users: LeakyReLU,
// Sigmoid, Tanh, Dropout2d, Functional, GroupNorm, ConvTranspose2d: values
// against loop references written here, gradchecks, shapes and messages.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/autocast.h"
#include "core/conv_transpose.h"
#include "core/factory.h"
#include "core/rng.h"
#include "core/tensor_functions.h"
#include "autograd/grad.h"
#include "nn/activation.h"
#include "nn/conv_transpose.h"
#include "nn/dropout.h"
#include "nn/functional_module.h"
#include "nn/group_norm.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
namespace nn = lockstep::nn;
using ls::testing::randn64;
using Inputs = std::vector<ls::Tensor>;

TEST_CASE("layers extra: LeakyReLU, Sigmoid, Tanh modules and Functional in a Sequential") {
  ls::Tensor x = ls::tensor(std::vector<float>{-2, 0, 3}, {3});
  CHECK(nn::LeakyReLU(0.1).forward(x).to_vector<float>() == std::vector<float>{-0.2f, 0, 3});
  CHECK(ls::allclose(nn::Sigmoid().forward(x), x.sigmoid()));
  CHECK(ls::allclose(nn::Tanh().forward(x), x.tanh()));
  ls::Tensor w = ls::tensor(std::vector<float>{-2, 0, 3}, {3}, ls::requires_grad());
  nn::LeakyReLU(0.1).forward(w).sum().backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{0.1f, 0.1f, 1});  // slope at 0, as PyTorch
  ls::manual_seed(41);
  ls::Tensor a = ls::testing::away_from_zero(randn64({2, 3}));
  CHECK_GRADCHECK([](const Inputs& v) { return nn::leaky_relu(v[0], 0.2); }, {a});

  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back("act", std::make_shared<nn::Functional>(ls::relu));
  seq->push_back("scale", std::make_shared<nn::Functional>([](const ls::Tensor& t) { return t * 2.0; }));
  CHECK(seq->forward(x).to_vector<float>() == std::vector<float>{0, 0, 6});
  CHECK(seq->parameters().empty());

  // libtorch's variadic Sequential(a, b, c): children named "0", "1", "2".
  auto fc = std::make_shared<nn::Linear>(3, 2);
  auto net = std::make_shared<nn::Sequential>(fc, std::make_shared<nn::Tanh>(), std::make_shared<nn::Sigmoid>());
  CHECK(net->size() == 3);
  CHECK(net->named_parameters()[0].first == "0.weight");
  CHECK(ls::allclose(net->forward(x.reshape({1, 3})), fc->forward(x.reshape({1, 3})).tanh().sigmoid()));
}

// The fused float32 CPU op (nn/leaky_relu.cpp) against the composed reference, bit
// for bit: values with zeros, negatives, NaN and a non-contiguous view, slopes
// 0.2, 0 and -0.5; the gradient, and with create_graph the gradient's gradient.
TEST_CASE("layers extra: the fused leaky_relu equals leaky_relu_reference, forward, backward, double backward") {
  ls::manual_seed(7);
  ls::Tensor base = ls::randn({4, 6, 5});
  base.narrow(2, 0, 1).zero_();                         // exact zeros: the kink
  base.narrow(2, 1, 1).fill_(std::nan(""));             // NaN goes through
  for (double slope : {0.2, 0.0, -0.5}) {
    for (bool strided : {false, true}) {
      CAPTURE(slope);
      CAPTURE(strided);
      ls::Tensor fused_x = (strided ? base.transpose(0, 2) : base).detach().requires_grad_(true);
      ls::Tensor ref_x = (strided ? base.transpose(0, 2) : base).detach().requires_grad_(true);
      ls::Tensor fused = nn::leaky_relu(fused_x, slope);
      ls::Tensor ref = nn::leaky_relu_reference(ref_x, slope);
      REQUIRE(fused.sizes() == ref.sizes());
      const auto fv = fused.contiguous().to_vector<float>(), rv = ref.contiguous().to_vector<float>();
      for (size_t i = 0; i < fv.size(); ++i) {
        REQUIRE(((std::isnan(fv[i]) && std::isnan(rv[i])) || fv[i] == rv[i]));
      }
      ls::Tensor g = ls::randn(fused.sizes());
      (fused * g).sum().backward();
      (ref * g).sum().backward();
      CHECK(fused_x.grad().to_vector<float>() == ref_x.grad().to_vector<float>());
    }
  }
  // create_graph: d/dw of sum(leaky_relu(x * w)) = sum(x * leaky'(x * w)), then d/dx of that.
  ls::Tensor x0 = ls::randn({3, 4}), w0 = ls::randn({3, 4});
  std::vector<std::vector<float>> second;
  for (auto* f : {+[](const ls::Tensor& t) { return nn::leaky_relu(t, 0.2); },
                  +[](const ls::Tensor& t) { return nn::leaky_relu_reference(t, 0.2); }}) {
    ls::Tensor x = x0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true);
    ls::Tensor gw = ls::autograd::grad({f(x * w).sum()}, {w}, {}, /*retain_graph=*/true,
                                       /*create_graph=*/true)[0];
    gw.sum().backward();
    second.push_back(x.grad().to_vector<float>());
    CHECK(ls::allclose(gw, x0 * ls::where((x0 * w0).gt(0.0), ls::ones({3, 4}), ls::full({3, 4}, 0.2f))));
  }
  CHECK(second[0] == second[1]);
}

TEST_CASE("layers extra: Dropout2d zeroes whole channels in training, identity in eval") {
  ls::manual_seed(42);
  nn::Dropout2d drop(0.5);
  ls::Tensor x = ls::ones({4, 8, 3, 3});
  ls::Tensor y = drop.forward(x);
  int zeroed = 0;
  for (int64_t n = 0; n < 4; ++n)
    for (int64_t c = 0; c < 8; ++c) {
      const std::vector<float> plane = y.select(0, n).select(0, c).contiguous().to_vector<float>();
      const bool zero = plane[0] == 0.0f;
      zeroed += zero;
      for (float v : plane) CHECK(v == (zero ? 0.0f : 2.0f));  // the whole plane, scaled by 1/(1-p)
    }
  CHECK(zeroed > 0);
  CHECK(zeroed < 32);
  drop.eval();
  CHECK(ls::equal(drop.forward(x), x));
  CHECK_THROWS_WITH_AS(drop.forward(ls::ones({3})), doctest::Contains("Dropout2d"), ls::Error);
}

TEST_CASE("layers extra: GroupNorm against a loop reference, gradcheck, eval equals train") {
  ls::manual_seed(43);
  nn::GroupNorm gn(2, 4, 1e-5);
  {
    ls::NoGradGuard no_grad;
    gn.weight.copy_(ls::tensor(std::vector<float>{1, 2, 0.5f, -1}, {4}));
    gn.bias.copy_(ls::tensor(std::vector<float>{0, 1, -1, 0.25f}, {4}));
  }
  ls::Tensor x = ls::randn({2, 4, 3});
  ls::Tensor y = gn.forward(x);
  const std::vector<float> xv = x.to_vector<float>(), yv = y.to_vector<float>();
  const std::vector<float> wv = gn.weight.to_vector<float>(), bv = gn.bias.to_vector<float>();
  for (int n = 0; n < 2; ++n)
    for (int g = 0; g < 2; ++g) {
      double mean = 0, var = 0;
      const int base = n * 12 + g * 6;  // 2 channels x 3 elements per group
      for (int i = 0; i < 6; ++i) mean += xv[base + i] / 6.0;
      for (int i = 0; i < 6; ++i) var += (xv[base + i] - mean) * (xv[base + i] - mean) / 6.0;
      for (int i = 0; i < 6; ++i) {
        const int c = g * 2 + i / 3;
        const double expect = (xv[base + i] - mean) / std::sqrt(var + 1e-5) * wv[c] + bv[c];
        CHECK(yv[base + i] == doctest::Approx(expect).epsilon(1e-5));
      }
    }
  gn.eval();
  CHECK(ls::allclose(gn.forward(x), y));
  ls::Tensor x64 = randn64({2, 4, 2}), w64 = randn64({4}), b64 = randn64({4});
  CHECK_GRADCHECK([](const Inputs& v) { return nn::group_norm(v[0], 2, v[1], v[2]); }, {x64, w64, b64});
  CHECK_THROWS_WITH_AS(nn::GroupNorm(3, 4), doctest::Contains("divide"), ls::Error);
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    CHECK(gn.forward(x.to(ls::kBFloat16)).dtype() == ls::kFloat32);
  }
}

namespace {
// y[n][co][h*s - p + kh*d][w*s - p + kw*d] += x[n][ci][h][w] * weight[ci][co][kh][kw] (groups = 1).
std::vector<double> conv_transpose_reference(const ls::Tensor& x, const ls::Tensor& w, int64_t s, int64_t p,
                                             int64_t op, int64_t d, ls::IntList& out_shape) {
  const int64_t N = x.size(0), Ci = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t Co = w.size(1), K = w.size(2);
  const int64_t Ho = (H - 1) * s - 2 * p + d * (K - 1) + op + 1, Wo = (W - 1) * s - 2 * p + d * (K - 1) + op + 1;
  out_shape = {N, Co, Ho, Wo};
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> y(static_cast<size_t>(N * Co * Ho * Wo), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ci = 0; ci < Ci; ++ci)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t ww = 0; ww < W; ++ww)
          for (int64_t co = 0; co < Co; ++co)
            for (int64_t kh = 0; kh < K; ++kh)
              for (int64_t kw = 0; kw < K; ++kw) {
                const int64_t oh = h * s - p + kh * d, ow = ww * s - p + kw * d;
                if (oh < 0 || oh >= Ho || ow < 0 || ow >= Wo) continue;
                y[((n * Co + co) * Ho + oh) * Wo + ow] +=
                    xv[((n * Ci + ci) * H + h) * W + ww] * wv[((ci * Co + co) * K + kh) * K + kw];
              }
  return y;
}
}  // namespace

TEST_CASE("layers extra: ConvTranspose2d against a loop reference, shapes, gradcheck") {
  ls::manual_seed(44);
  struct Case { int64_t s, p, op, d; };
  for (Case c : {Case{1, 0, 0, 1}, Case{2, 1, 0, 1}, Case{2, 1, 1, 1}, Case{3, 0, 2, 1}, Case{1, 1, 0, 2}}) {
    CAPTURE(c.s);
    CAPTURE(c.p);
    CAPTURE(c.op);
    CAPTURE(c.d);
    ls::Tensor x = randn64({2, 3, 4, 3}), w = randn64({3, 2, 3, 3}), b = randn64({2});
    ls::IntList shape;
    const std::vector<double> ref = conv_transpose_reference(x, w, c.s, c.p, c.op, c.d, shape);
    ls::Tensor y = ls::conv_transpose2d(x, w, ls::Tensor(), {c.s, c.s}, {c.p, c.p}, {c.op, c.op}, 1, {c.d, c.d});
    REQUIRE(y.sizes() == shape);
    CHECK(ls::allclose(y, ls::tensor(ref, shape), 1e-10, 1e-10));
    ls::Tensor yb = ls::conv_transpose2d(x, w, b, {c.s, c.s}, {c.p, c.p}, {c.op, c.op}, 1, {c.d, c.d});
    CHECK(ls::allclose(yb, y + b.reshape({1, 2, 1, 1}), 1e-10, 1e-10));
  }
  ls::Tensor x = randn64({1, 2, 3, 3}), w = randn64({2, 2, 3, 3}), b = randn64({2});
  CHECK_GRADCHECK([](const Inputs& v) {
    return ls::conv_transpose2d(v[0], v[1], v[2], {2, 2}, {1, 1}, {1, 1});
  }, {x, w, b});
  ls::Tensor wg = randn64({2, 1, 2, 2});  // groups = 2: 2 in, 2 out
  CHECK_GRADCHECK([](const Inputs& v) { return ls::conv_transpose2d(v[0], v[1], ls::Tensor(), {1, 1}, {0, 0}, {0, 0}, 2); },
                  {x, wg});

  nn::ConvTranspose2d up(nn::ConvTranspose2dOptions(4, 3, 4).stride(2).padding(1));
  CHECK(up.weight.sizes() == ls::IntList{4, 3, 4, 4});
  CHECK(up.forward(ls::randn({2, 4, 5, 5})).sizes() == ls::IntList{2, 3, 10, 10});  // DCGAN's doubling
  CHECK_THROWS_WITH_AS(up.forward(ls::randn({2, 3, 5, 5})), doctest::Contains("expected input (N, 4, H, W)"),
                       ls::Error);
  CHECK_THROWS_WITH_AS(ls::conv_transpose2d(x, w, ls::Tensor(), {1, 1}, {0, 0}, {1, 1}),
                       doctest::Contains("output_padding"), ls::Error);
}
