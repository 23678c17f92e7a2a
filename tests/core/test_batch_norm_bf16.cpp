// tests/core/test_batch_norm_bf16.cpp — batch norm on bfloat16 activations
// (Note [bfloat16 batch norm]) against its reference: the float32 kernel run on
// the widened bf16 input, its results rounded to bf16. The bf16 kernel runs the
// same float32 arithmetic on the same values, so every check is bit for bit;
// channels of more than one summation block (S > 4096) are included.
// Also: the autograd op under autocast keeps bf16 through conv -> BN -> ReLU, its
// gradients have the right dtypes, and mixed operands get clear errors.
#include <doctest/doctest.h>

#include <tuple>

#include "core/autocast.h"
#include "core/factory.h"
#include "core/native/fused_relu.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/nn_ops.h"
#include "core/rng.h"

namespace ls = lockstep;
namespace nv = lockstep::native;

namespace {

ls::Tensor bf16_randn(const ls::IntList& sizes, double scale = 1.0, double offset = 0.0) {
  return nv::to_dtype(ls::randn(sizes) * scale + offset, ls::kBFloat16);
}
ls::Tensor widen(const ls::Tensor& t) { return nv::to_dtype(t, ls::kFloat32); }
ls::Tensor round16(const ls::Tensor& t) { return nv::to_dtype(t, ls::kBFloat16); }

// The shapes: one with small planes, one whose channel runs span two
// summation blocks (S = 70 * 61 = 4270 > 4096), and an (N, C) input.
const ls::IntList kShapes[] = {{4, 6, 5, 7}, {2, 3, 70, 61}, {16, 5}};

}  // namespace

TEST_CASE("bf16 batch norm forward equals the float32 kernel on the widened input, rounded") {
  ls::manual_seed(31);
  for (const ls::IntList& sizes : kShapes) {
    const int64_t c = sizes[1];
    const ls::Tensor x = bf16_randn(sizes, 2.0, 3.0), res = bf16_randn(sizes);
    const ls::Tensor w = ls::randn({c}), b = ls::randn({c});
    for (bool training : {true, false}) {
      for (int form = 0; form < 3; ++form) {  // batch_norm, + ReLU, + add + ReLU
        CAPTURE(sizes.size());
        CAPTURE(training);
        CAPTURE(form);
        ls::Tensor rm16 = ls::randn({c}), rv16 = ls::rand({c}) + 0.5;
        ls::Tensor rm32 = nv::clone(rm16), rv32 = nv::clone(rv16);
        auto run = [&](const ls::Tensor& in, const ls::Tensor& r, ls::Tensor& rm, ls::Tensor& rv) {
          if (form == 0) return nv::batch_norm_forward(in, w, b, rm, rv, training, 0.1, 1e-5);
          if (form == 1) return nv::batch_norm_relu_forward(in, w, b, rm, rv, training, 0.1, 1e-5);
          return nv::batch_norm_add_relu_forward(in, r, w, b, rm, rv, training, 0.1, 1e-5);
        };
        auto [y16, mean16, invstd16] = run(x, res, rm16, rv16);
        auto [y32, mean32, invstd32] = run(widen(x), widen(res), rm32, rv32);
        CHECK(y16.dtype() == ls::kBFloat16);
        CHECK(mean16.dtype() == ls::kFloat32);
        CHECK(nv::equal(y16, round16(y32)));
        CHECK(nv::equal(mean16, mean32));
        CHECK(nv::equal(invstd16, invstd32));
        CHECK(nv::equal(rm16, rm32));  // the running statistics move alike
        CHECK(nv::equal(rv16, rv32));
      }
    }
  }
}

TEST_CASE("bf16 batch norm backward equals the float32 kernel on the widened operands, rounded") {
  ls::manual_seed(32);
  for (const ls::IntList& sizes : kShapes) {
    const int64_t c = sizes[1];
    const ls::Tensor x = bf16_randn(sizes, 2.0, -1.0), gy = bf16_randn(sizes);
    const ls::Tensor w = ls::randn({c}), b = ls::randn({c});
    ls::Tensor rm = ls::zeros({c}), rv = ls::ones({c});
    for (bool training : {true, false}) {
      CAPTURE(training);
      auto [out, mean, invstd] = nv::batch_norm_relu_forward(x, w, b, rm, rv, training, 0.1, 1e-5);
      auto same = [](const std::tuple<ls::Tensor, ls::Tensor, ls::Tensor>& bf,
                     const std::tuple<ls::Tensor, ls::Tensor, ls::Tensor>& f) {
        CHECK(std::get<0>(bf).dtype() == ls::kBFloat16);
        CHECK(std::get<1>(bf).dtype() == ls::kFloat32);
        CHECK(nv::equal(std::get<0>(bf), round16(std::get<0>(f))));
        CHECK(nv::equal(std::get<1>(bf), std::get<1>(f)));
        CHECK(nv::equal(std::get<2>(bf), std::get<2>(f)));
      };
      same(nv::batch_norm_backward(gy, x, w, mean, invstd, training, true, true, true),
           nv::batch_norm_backward(widen(gy), widen(x), w, mean, invstd, training, true, true, true));
      same(nv::batch_norm_relu_backward(gy, x, w, mean, invstd, out, training, true, true, true),
           nv::batch_norm_relu_backward(widen(gy), widen(x), w, mean, invstd, widen(out), training,
                                        true, true, true));
      same(nv::batch_norm_relu_backward_from_input(gy, x, w, b, mean, invstd, training, true, true,
                                                   true),
           nv::batch_norm_relu_backward_from_input(widen(gy), widen(x), w, b, mean, invstd,
                                                   training, true, true, true));
      auto [gi16, gw16, gb16, gr16] =
          nv::batch_norm_add_relu_backward(gy, x, w, mean, invstd, out, training, true, true, true);
      auto [gi32, gw32, gb32, gr32] = nv::batch_norm_add_relu_backward(
          widen(gy), widen(x), w, mean, invstd, widen(out), training, true, true, true);
      same({gi16, gw16, gb16}, {gi32, gw32, gb32});
      CHECK(gr16.dtype() == ls::kBFloat16);
      CHECK(nv::equal(widen(gr16), gr32));  // g or 0: exact in bf16
    }
  }
}

TEST_CASE("bf16 batch norm: operands of the wrong dtype are named") {
  const ls::Tensor x = bf16_randn({2, 3, 4, 4});
  const ls::Tensor w16 = round16(ls::ones({3}));
  CHECK_THROWS_WITH_AS(nv::batch_norm_forward(x, w16, ls::Tensor(), ls::Tensor(), ls::Tensor(),
                                              true, 0.1, 1e-5),
                       doctest::Contains("weight is bfloat16, but a bfloat16 input takes float32"),
                       ls::Error);
  CHECK_THROWS_WITH_AS(nv::batch_norm_add_relu_forward(x, ls::randn({2, 3, 4, 4}), ls::Tensor(),
                                                       ls::Tensor(), ls::Tensor(), ls::Tensor(),
                                                       true, 0.1, 1e-5),
                       doctest::Contains("residual"), ls::Error);
  CHECK_THROWS_WITH_AS(nv::batch_norm_forward(bf16_randn({1, 3}), ls::Tensor(), ls::Tensor(),
                                              ls::Tensor(), ls::Tensor(), true, 0.1, 1e-5),
                       doctest::Contains("more than 1 value per channel"), ls::Error);
}

TEST_CASE("bf16 batch norm under autocast: bf16 through conv -> BN -> ReLU, float32 parameter grads") {
  ls::manual_seed(33);
  ls::Tensor x = ls::randn({2, 3, 8, 8});
  ls::Tensor cw = ls::randn({4, 3, 3, 3}) * 0.3, w = ls::ones({4}), b = ls::zeros({4});
  cw.requires_grad_(true);
  w.requires_grad_(true);
  b.requires_grad_(true);
  ls::Tensor rm = ls::zeros({4}), rv = ls::ones({4});
  ls::Tensor loss;
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    const ls::Tensor y = ls::conv2d(x, cw, ls::Tensor(), {1, 1}, {1, 1});  // (2, 4, 8, 8) bf16
    const ls::Tensor h = ls::batch_norm_relu(y, w, b, rm, rv, true, 0.1, 1e-5);
    CHECK(h.dtype() == ls::kBFloat16);
    const ls::Tensor z = ls::batch_norm_add_relu(y, h, w, b, rm, rv, true, 0.1, 1e-5);
    CHECK(z.dtype() == ls::kBFloat16);
    loss = z.to(ls::kFloat32).sum();
  }
  loss.backward();
  CHECK(cw.grad().dtype() == ls::kFloat32);
  CHECK(w.grad().dtype() == ls::kFloat32);
  CHECK(b.grad().dtype() == ls::kFloat32);
  CHECK(rm.dtype() == ls::kFloat32);
  // A float32 residual with a bf16 input computes in float32 under autocast.
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    const ls::Tensor y = ls::conv2d(x, cw, ls::Tensor(), {1, 1}, {1, 1});
    CHECK(ls::batch_norm_add_relu(y, ls::randn({2, 4, 8, 8}), w, b, rm, rv, true, 0.1, 1e-5)
              .dtype() == ls::kFloat32);
  }
}
