// tests/core/test_batch_norm_bf16_nhwc.cpp — the channels-last bfloat16 batch norm
// (Note [bfloat16 batch norm on channels-last activations]) against the NCHW one
// (Note [bfloat16 batch norm]) on the same bf16 values: the NCHW kernel runs on
// contiguous operands, the channels-last kernel on channels_last copies of them.
// The two differ only in the order of the float sums, so the tolerances are:
//   - bf16 outputs (y, grad_input): at most 1 bf16 ulp apart, or within an atol
//     of 1e-5 * max|reference| (a value near 0 from the cancellation of terms of
//     that size moves by a few float ulps of the terms, many bf16 ulps of itself);
//   - float32 statistics (mean, invstd, running stats): rtol 1e-5, atol 1e-5;
//   - grad_weight, grad_bias (sums of M terms of size ~1): rtol 1e-5,
//     atol 1e-5 * sqrt(M);
//   - grad_residual (g or 0, the masks being equal): bit for bit.
// Also: results are channels-last, other operands may come in either order, the
// result does not depend on the thread count (bit for bit), and inputs that are
// both contiguous and channels-last keep taking the NCHW kernel.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <tuple>

#include "core/factory.h"
#include "core/native/batch_norm_bf16.h"
#include "core/native/fused_relu.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/parallel.h"
#include "core/rng.h"

namespace ls = lockstep;
namespace nv = lockstep::native;

namespace {

using Triple = std::tuple<ls::Tensor, ls::Tensor, ls::Tensor>;

ls::Tensor bf16_randn(const ls::IntList& sizes, double scale = 1.0, double offset = 0.0) {
  return nv::to_dtype(ls::randn(sizes) * scale + offset, ls::kBFloat16);
}
ls::Tensor widen(const ls::Tensor& t) { return nv::to_dtype(t, ls::kFloat32); }
// Defined-preserving channels_last.
ls::Tensor cl(const ls::Tensor& t) { return t.defined() ? nv::channels_last(t) : t; }
bool strictly_channels_last(const ls::Tensor& t) {
  return nv::is_channels_last(t) && !t.is_contiguous();
}
double max_abs(const ls::Tensor& t) {
  return nv::max_all(nv::unary(nv::UnaryOp::Abs, widen(t))).item<float>();
}

// A bf16 value's bits as an integer in value order: adjacent bf16 values differ by 1.
int ordered(uint16_t bits) { return (bits & 0x8000) != 0 ? -(bits & 0x7fff) : bits; }

// The number of elements of a and b (bf16, same shape) more than one bf16 ulp
// and more than 1e-5 * max|b| apart.
int64_t far_apart(const ls::Tensor& a, const ls::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  REQUIRE(a.dtype() == ls::kBFloat16);
  REQUIRE(b.dtype() == ls::kBFloat16);
  const double atol = 1e-5 * max_abs(b);
  const ls::Tensor ac = nv::contiguous(a), bc = nv::contiguous(b);
  const ls::BFloat16* p = ac.data_ptr<ls::BFloat16>();
  const ls::BFloat16* q = bc.data_ptr<ls::BFloat16>();
  int64_t far = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::abs(static_cast<double>(p[i]) - static_cast<double>(q[i]));
    if (d > atol && std::abs(ordered(p[i].bits) - ordered(q[i].bits)) > 1) ++far;
  }
  return far;
}

bool stats_close(const ls::Tensor& a, const ls::Tensor& b) {
  return nv::allclose(a, b, 1e-5, 1e-5);
}

// Shapes: C a multiple of 16 or not, N H W = R from 70 rows (one statistics block)
// to 1568 (several, the last partial); C = 2100 runs past a widened span (2048).
const ls::IntList kShapes[] = {{2, 3, 5, 7}, {4, 17, 9, 9}, {8, 64, 14, 14}, {2, 2100, 3, 3}};

}  // namespace

TEST_CASE("channels-last bf16 batch norm forward matches the NCHW kernel") {
  ls::manual_seed(41);
  for (const ls::IntList& sizes : kShapes) {
    const int64_t c = sizes[1];
    const ls::Tensor x = bf16_randn(sizes, 2.0, 3.0), res = bf16_randn(sizes);
    const ls::Tensor w = ls::randn({c}), b = ls::randn({c});
    for (int variant = 0; variant < 4; ++variant) {  // training with / without running stats, eval
      const bool training = variant < 3, running = variant != 1, affine = variant != 2;
      for (int form = 0; form < 3; ++form) {  // batch_norm, + ReLU, + add + ReLU
        CAPTURE(c);
        CAPTURE(variant);
        CAPTURE(form);
        const ls::Tensor wt = affine ? w : ls::Tensor(), bt = affine ? b : ls::Tensor();
        ls::Tensor rm = running ? ls::randn({c}) : ls::Tensor();
        ls::Tensor rv = running ? ls::rand({c}) + 0.5 : ls::Tensor();
        ls::Tensor rm2 = running ? nv::clone(rm) : rm, rv2 = running ? nv::clone(rv) : rv;
        auto run = [&](const ls::Tensor& in, const ls::Tensor& r, ls::Tensor& m, ls::Tensor& v) {
          if (form == 0) return nv::batch_norm_forward(in, wt, bt, m, v, training, 0.1, 1e-5);
          if (form == 1) return nv::batch_norm_relu_forward(in, wt, bt, m, v, training, 0.1, 1e-5);
          return nv::batch_norm_add_relu_forward(in, r, wt, bt, m, v, training, 0.1, 1e-5);
        };
        auto [y, mean, invstd] = run(x, res, rm, rv);
        auto [y2, mean2, invstd2] = run(cl(x), cl(res), rm2, rv2);
        CHECK(y.is_contiguous());
        CHECK(strictly_channels_last(y2));
        CHECK(y2.dtype() == ls::kBFloat16);
        CHECK(mean2.dtype() == ls::kFloat32);
        CHECK(far_apart(y2, y) == 0);
        CHECK(stats_close(mean2, mean));
        CHECK(stats_close(invstd2, invstd));
        if (running) {
          CHECK(stats_close(rm2, rm));  // the running statistics move alike
          CHECK(stats_close(rv2, rv));
        }
      }
    }
  }
}

TEST_CASE("channels-last bf16 batch norm: statistics of an offset input stay accurate") {
  ls::manual_seed(42);
  const ls::Tensor x = bf16_randn({8, 32, 12, 12}, 0.5, 40.0);  // |mean| = 80 std
  auto [y, mean, invstd] = nv::batch_norm_forward(x, ls::Tensor(), ls::Tensor(), ls::Tensor(),
                                                  ls::Tensor(), true, 0.1, 1e-5);
  auto [y2, mean2, invstd2] = nv::batch_norm_forward(cl(x), ls::Tensor(), ls::Tensor(),
                                                     ls::Tensor(), ls::Tensor(), true, 0.1, 1e-5);
  CHECK(stats_close(mean2, mean));
  CHECK(stats_close(invstd2, invstd));
  CHECK(far_apart(y2, y) == 0);
  // and against float64 statistics of the same values: an unshifted float sum of
  // x^2 (~1600 each) would lose the variance (0.25) to cancellation.
  const ls::Tensor xd = nv::to_dtype(x, ls::kFloat64);
  const ls::Tensor mean64 = nv::mean(xd, {0, 2, 3}, false);  // (C)
  const ls::Tensor dev = nv::binary(nv::BinaryOp::Sub, xd, nv::view(mean64, {1, 32, 1, 1}));
  const ls::Tensor var64 = nv::mean(nv::binary(nv::BinaryOp::Mul, dev, dev), {0, 2, 3}, false);
  const ls::Tensor invstd64 =
      nv::unary(nv::UnaryOp::Rsqrt, nv::binary_scalar(nv::BinaryOp::Add, var64, 1e-5));
  CHECK(nv::allclose(nv::to_dtype(mean2, ls::kFloat64), mean64, 1e-6, 0.0));
  CHECK(nv::allclose(nv::to_dtype(invstd2, ls::kFloat64), invstd64, 1e-5, 0.0));
}

TEST_CASE("channels-last bf16 batch norm backward matches the NCHW kernel") {
  ls::manual_seed(43);
  const bool flags[][3] = {{true, true, true},
                           {true, false, false},
                           {false, true, false},
                           {false, false, true},
                           {false, false, false}};
  for (const ls::IntList& sizes : kShapes) {
    const int64_t c = sizes[1], m = sizes[0] * sizes[2] * sizes[3];
    const double sum_atol = 1e-5 * std::sqrt(static_cast<double>(m));
    const ls::Tensor x = bf16_randn(sizes, 2.0, -1.0), gy = bf16_randn(sizes);
    const ls::Tensor w = ls::randn({c}), b = ls::randn({c});
    ls::Tensor rm = ls::zeros({c}), rv = ls::ones({c});
    for (bool training : {true, false}) {
      for (bool affine : {true, false}) {
        const ls::Tensor wt = affine ? w : ls::Tensor(), bt = affine ? b : ls::Tensor();
        // The forward's statistics and output, from the NCHW kernel: both backwards get them.
        auto [out, mean, invstd] =
            nv::batch_norm_relu_forward(x, wt, bt, rm, rv, training, 0.1, 1e-5);
        for (const auto& f : flags) {
          for (int kind = 0; kind < 4; ++kind) {  // plain, relu (output), relu (input), add_relu
            CAPTURE(c);
            CAPTURE(training);
            CAPTURE(affine);
            CAPTURE(f[0]);
            CAPTURE(f[1]);
            CAPTURE(f[2]);
            CAPTURE(kind);
            ls::Tensor gr, gr2;
            auto run = [&](const ls::Tensor& g, const ls::Tensor& in, const ls::Tensor& o,
                           ls::Tensor& g_res) -> Triple {
              if (kind == 0) {
                return nv::batch_norm_backward(g, in, wt, mean, invstd, training, f[0], f[1], f[2]);
              }
              if (kind == 1) {
                return nv::batch_norm_relu_backward(g, in, wt, mean, invstd, o, training, f[0],
                                                    f[1], f[2]);
              }
              if (kind == 2) {
                return nv::batch_norm_relu_backward_from_input(g, in, wt, bt, mean, invstd,
                                                               training, f[0], f[1], f[2]);
              }
              auto [gi, gw, gb, grs] = nv::batch_norm_add_relu_backward(g, in, wt, mean, invstd, o,
                                                                        training, f[0], f[1], f[2]);
              g_res = grs;
              return {gi, gw, gb};
            };
            auto [gi, gw, gb] = run(gy, x, out, gr);
            auto [gi2, gw2, gb2] = run(cl(gy), cl(x), cl(out), gr2);
            REQUIRE(gi2.defined() == f[0]);
            REQUIRE(gw2.defined() == f[1]);
            REQUIRE(gb2.defined() == f[2]);
            if (f[0]) {
              CHECK(strictly_channels_last(gi2));
              CHECK(far_apart(gi2, gi) == 0);
            }
            if (f[1]) CHECK(nv::allclose(gw2, gw, 1e-5, sum_atol));
            if (f[2]) CHECK(nv::allclose(gb2, gb, 1e-5, sum_atol));
            if (kind == 3) {
              CHECK(strictly_channels_last(gr2));
              CHECK(nv::equal(gr2, gr));  // g or 0 under the same mask: exact
            }
          }
        }
      }
    }
  }
}

TEST_CASE("channels-last bf16 batch norm: the other operands may come in either order") {
  ls::manual_seed(44);
  const ls::IntList sizes = {4, 17, 9, 9};
  const ls::Tensor x = cl(bf16_randn(sizes, 2.0, 1.0)), res = bf16_randn(sizes);
  const ls::Tensor gy = bf16_randn(sizes), w = ls::randn({17}), b = ls::randn({17});
  REQUIRE(res.is_contiguous());
  REQUIRE(strictly_channels_last(x));
  auto [y, mean, invstd] =
      nv::batch_norm_add_relu_forward(x, res, w, b, ls::Tensor(), ls::Tensor(), true, 0.1, 1e-5);
  auto [y2, mean2, invstd2] = nv::batch_norm_add_relu_forward(x, cl(res), w, b, ls::Tensor(),
                                                              ls::Tensor(), true, 0.1, 1e-5);
  CHECK(strictly_channels_last(y));
  CHECK(nv::equal(y, y2));
  CHECK(nv::equal(mean, mean2));
  const ls::Tensor y_nchw = nv::contiguous(y);
  REQUIRE(y_nchw.is_contiguous());
  auto [gi, gw, gb, gr] =
      nv::batch_norm_add_relu_backward(gy, x, w, mean, invstd, y_nchw, true, true, true, true);
  auto [gi2, gw2, gb2, gr2] =
      nv::batch_norm_add_relu_backward(cl(gy), x, w, mean, invstd, y, true, true, true, true);
  CHECK(strictly_channels_last(gi));
  CHECK(strictly_channels_last(gr));
  CHECK(nv::equal(gi, gi2));
  CHECK(nv::equal(gw, gw2));
  CHECK(nv::equal(gb, gb2));
  CHECK(nv::equal(gr, gr2));
}

TEST_CASE("channels-last bf16 batch norm: the same bits on 1 and 2 threads") {
  ls::manual_seed(45);
  const ls::IntList sizes = {8, 64, 14, 14};  // 1568 rows: 7 statistics blocks
  const ls::Tensor x = cl(bf16_randn(sizes, 2.0, 3.0)), gy = cl(bf16_randn(sizes));
  const ls::Tensor w = ls::randn({64}), b = ls::randn({64});
  const int saved = ls::get_num_threads();
  auto run = [&](int threads) {
    ls::set_num_threads(threads);
    ls::Tensor rm = ls::zeros({64}), rv = ls::ones({64});
    auto [y, mean, invstd] = nv::batch_norm_relu_forward(x, w, b, rm, rv, true, 0.1, 1e-5);
    auto [gi, gw, gb] =
        nv::batch_norm_relu_backward_from_input(gy, x, w, b, mean, invstd, true, true, true, true);
    return std::vector<ls::Tensor>{y, mean, invstd, rm, rv, gi, gw, gb};
  };
  const std::vector<ls::Tensor> one = run(1), two = run(2);
  ls::set_num_threads(saved);
  REQUIRE(one.size() == two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    CAPTURE(i);
    CHECK(nv::equal(one[i], two[i]));
  }
  CHECK(strictly_channels_last(one[0]));
}

// The two grad_input passes whose ReLU mask is not the saved output (Mask::Bits:
// batch_norm_add_relu's bits; Mask::Input: recomputed from the input), on 1 and 2
// threads, against the NCHW kernel given the same mask as an output. A sanitizer
// build once crashed in exactly these (Note [Row-kernel operands by reference] in
// core/native/fast/batch_norm_bf16_nhwc_rows.h).
TEST_CASE(
    "channels-last bf16 batch norm: grad_input from the ReLU's bits or the input, 1 and 2 "
    "threads, matches the NCHW kernel") {
  ls::manual_seed(47);
  const int saved = ls::get_num_threads();
  for (const ls::IntList& sizes : kShapes) {
    const int64_t c = sizes[1], m = sizes[0] * sizes[2] * sizes[3];
    const double sum_atol = 1e-5 * std::sqrt(static_cast<double>(m));
    const ls::Tensor x = bf16_randn(sizes, 2.0, -0.5), res = bf16_randn(sizes);
    const ls::Tensor gy = bf16_randn(sizes), w = ls::randn({c}), b = ls::randn({c});
    for (const bool training : {true, false}) {
      for (const int threads : {1, 2}) {
        CAPTURE(c);
        CAPTURE(training);
        CAPTURE(threads);
        ls::set_num_threads(threads);
        ls::Tensor rm = ls::zeros({c}), rv = ls::ones({c}), bits;
        auto [y, mean, invstd] = nv::batch_norm_add_relu_forward(cl(x), cl(res), w, b, rm, rv,
                                                                 training, 0.1, 1e-5, &bits);
        REQUIRE(bits.defined());
        auto [gi, gw, gb, gr] = nv::batch_norm_add_relu_backward_bits(
            cl(gy), cl(x), w, mean, invstd, bits, training, true, true, true);
        auto [rgi, rgw, rgb, rgr] = nv::batch_norm_add_relu_backward(
            gy, x, w, mean, invstd, nv::contiguous(y), training, true, true, true);
        CHECK(strictly_channels_last(gi));
        CHECK(far_apart(gi, rgi) == 0);
        CHECK(nv::allclose(gw, rgw, 1e-5, sum_atol));
        CHECK(nv::allclose(gb, rgb, 1e-5, sum_atol));
        CHECK(nv::equal(gr, rgr));  // g or 0 under the same mask: exact
        auto [gi2, gw2, gb2] = nv::batch_norm_relu_backward_from_input(
            cl(gy), cl(x), w, b, mean, invstd, training, true, true, true);
        auto [rgi2, rgw2, rgb2] = nv::batch_norm_relu_backward_from_input(
            gy, x, w, b, mean, invstd, training, true, true, true);
        CHECK(strictly_channels_last(gi2));
        CHECK(far_apart(gi2, rgi2) == 0);
        CHECK(nv::allclose(gw2, rgw2, 1e-5, sum_atol));
        CHECK(nv::allclose(gb2, rgb2, 1e-5, sum_atol));
      }
    }
  }
  ls::set_num_threads(saved);
}

TEST_CASE(
    "bf16 batch norm: inputs that are both contiguous and channels-last stay on the NCHW kernel") {
  ls::manual_seed(46);
  for (const ls::IntList& sizes : {ls::IntList{4, 1, 5, 5}, ls::IntList{8, 6, 1, 1}}) {
    const ls::Tensor x = bf16_randn(sizes);
    REQUIRE(nv::is_channels_last(x));
    REQUIRE(x.is_contiguous());
    auto [y, mean, invstd] = nv::batch_norm_relu_forward(
        x, ls::Tensor(), ls::Tensor(), ls::Tensor(), ls::Tensor(), true, 0.1, 1e-5);
    CHECK(y.is_contiguous());
    CHECK(y.dtype() == ls::kBFloat16);
    // The NCHW kernel's promise (Note [bfloat16 batch norm]): the float32 kernel's bits.
    auto [y32, mean32, invstd32] = nv::batch_norm_relu_forward(
        widen(x), ls::Tensor(), ls::Tensor(), ls::Tensor(), ls::Tensor(), true, 0.1, 1e-5);
    CHECK(nv::equal(y, nv::to_dtype(y32, ls::kBFloat16)));
    CHECK(nv::equal(invstd, invstd32));
  }
  // A plain NCHW input keeps returning NCHW.
  auto [y, mean, invstd] =
      nv::batch_norm_forward(bf16_randn({2, 3, 4, 5}), ls::Tensor(), ls::Tensor(), ls::Tensor(),
                             ls::Tensor(), true, 0.1, 1e-5);
  CHECK(y.is_contiguous());
  CHECK_FALSE(nv::is_channels_last(y));
}

TEST_CASE("channels-last bf16 batch norm: the kernels refuse an input of the other order") {
  const ls::Tensor x = bf16_randn({2, 3, 4, 4});
  CHECK_THROWS_WITH_AS(
      nv::batch_norm_bf16_nhwc_forward(x, ls::Tensor(), ls::Tensor(), ls::Tensor(), ls::Tensor(),
                                       ls::Tensor(), true, 0.1, 1e-5, false, "batch_norm"),
      doctest::Contains("(not channels-last)"), ls::Error);
  const ls::Tensor g = cl(bf16_randn({2, 3, 4, 4}));
  CHECK_THROWS_WITH_AS(nv::batch_norm_bf16_nhwc_backward(
                           g, x, ls::Tensor(), ls::Tensor(), ls::ones({3}), ls::ones({3}),
                           ls::Tensor(), nv::batch_norm_detail::Mask::None, true, true, true, true,
                           nullptr, "batch_norm_backward"),
                       doctest::Contains("takes a channels-last bfloat16 input"), ls::Error);
}
