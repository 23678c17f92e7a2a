// tests/core/test_channels_last.cpp — Note [Channels-last activations]: the layout
// helpers, elementwise ops that keep channels-last order, and the bf16
// convolutions taking and returning either order with the same values.
//
// Which order the convolutions return is conv_bf16_channels_last() (read once from
// LOCKSTEP_BF16_CHANNELS_LAST); CTest runs these cases under both settings.
#include <doctest/doctest.h>

#include <cstring>
#include <limits>
#include <string>

#include "core/autocast.h"
#include "core/env_flag.h"
#include "core/factory.h"
#include "core/native/conv_bf16.h"
#include "core/native/fast/onednn_engine.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "tests/support/compare.h"

namespace ls = lockstep;
namespace nv = lockstep::native;
using ls::testing::relative_error;

namespace {

ls::Tensor bf16_randn(const ls::IntList& sizes) { return nv::to_dtype(ls::randn(sizes), ls::kBFloat16); }

// The order a convolution returns for a channels-last input, as a check on a result.
bool in_conv_order(const ls::Tensor& t) {
  return nv::conv_bf16_channels_last() ? nv::is_channels_last(t) : t.is_contiguous();
}

}  // namespace

TEST_CASE("channels_last: strides, copies and the tensors that are both orders") {
  ls::manual_seed(1);
  const ls::Tensor x = ls::randn({2, 3, 4, 5});
  CHECK_FALSE(nv::is_channels_last(x));
  const ls::Tensor cl = nv::channels_last(x);
  CHECK(nv::is_channels_last(cl));
  CHECK_FALSE(cl.is_contiguous());
  CHECK(cl.strides() == ls::IntList{60, 1, 15, 3});
  CHECK(cl.sizes() == x.sizes());
  CHECK(nv::equal(cl, x));                       // the same values, another order
  CHECK(nv::channels_last(cl).is_same(cl));      // already channels-last: itself
  CHECK(nv::contiguous(cl).is_contiguous());
  CHECK(nv::equal(nv::contiguous(cl), x));
  // One channel, or one pixel: the two orders are the same bytes.
  CHECK(nv::is_channels_last(ls::randn({2, 1, 4, 5})));
  CHECK(nv::is_channels_last(ls::randn({2, 7, 1, 1})));
  CHECK(nv::is_dense(cl));
  CHECK_FALSE(nv::is_dense(x.transpose(2, 3)));
  CHECK(nv::same_dense_layout(cl, nv::channels_last(ls::randn({2, 3, 4, 5}))));
  CHECK_FALSE(nv::same_dense_layout(cl, x));
  CHECK_FALSE(nv::is_channels_last(ls::randn({3, 4, 5})));  // not 4-d
  // A view across the permuted dims needs a copy: the error says why and what to do.
  CHECK_THROWS_WITH_AS(nv::view(cl, {2, 60}), doctest::Contains("stored channels-last"), ls::Error);
  CHECK(nv::equal(nv::reshape(cl, {2, 60}), nv::reshape(x, {2, 60})));
  CHECK_THROWS_WITH_AS(nv::empty_channels_last({3, 4}, ls::kFloat32),
                       doctest::Contains("(N, C, H, W)"), ls::Error);
}

TEST_CASE("channels_last: elementwise results keep the order and equal the NCHW results") {
  ls::manual_seed(2);
  for (ls::ScalarType dt : {ls::kFloat32, ls::kBFloat16}) {
    CAPTURE(std::string(ls::dtype_name(dt)));
    const ls::Tensor a = nv::to_dtype(ls::randn({2, 5, 3, 4}), dt);
    const ls::Tensor b = nv::to_dtype(ls::randn({2, 5, 3, 4}), dt);
    const ls::Tensor a_cl = nv::channels_last(a), b_cl = nv::channels_last(b);
    const ls::Tensor sum_cl = nv::add(a_cl, b_cl), prod_cl = nv::binary(nv::BinaryOp::Mul, a_cl, b_cl);
    CHECK(nv::is_channels_last(sum_cl));
    CHECK(nv::equal(sum_cl, nv::add(a, b)));
    CHECK(nv::equal(prod_cl, nv::binary(nv::BinaryOp::Mul, a, b)));
    // Mixed orders: the result takes the channels-last one's; values are the same.
    CHECK(nv::is_channels_last(nv::add(a, b_cl)));
    CHECK(nv::equal(nv::add(a, b_cl), nv::add(a, b)));
    // A broadcast operand (C, 1, 1) with a channels-last one.
    const ls::Tensor bias = nv::to_dtype(ls::randn({5, 1, 1}), dt);
    CHECK(nv::equal(nv::add(a_cl, bias), nv::add(a, bias)));
    const ls::Tensor r = nv::unary(nv::UnaryOp::Relu, a_cl);
    CHECK(nv::is_channels_last(r));
    CHECK(nv::equal(r, nv::unary(nv::UnaryOp::Relu, a)));
    const ls::Tensor rb = nv::relu_backward(b_cl, a_cl);
    CHECK(nv::is_channels_last(rb));
    CHECK(nv::equal(rb, nv::relu_backward(b, a)));
    CHECK(nv::equal(nv::relu_backward(b, a_cl), nv::relu_backward(b, a)));  // mixed orders
    // In place into a channels-last tensor.
    ls::Tensor acc = nv::channels_last(nv::clone(a));
    nv::binary_(nv::BinaryOp::Add, acc, b);
    CHECK(nv::equal(acc, nv::add(a, b)));
    // Conversions keep the order.
    const ls::Tensor f = nv::to_dtype(a_cl, dt == ls::kFloat32 ? ls::kBFloat16 : ls::kFloat32);
    CHECK(nv::is_channels_last(f));
    CHECK(nv::equal(f, nv::to_dtype(a, f.dtype())));
  }
}

TEST_CASE("conv2d_bf16: either input order and either gradient order give the same bits") {
  ls::manual_seed(3);
  struct Case {
    int64_t n, c_in, h, c_out, k, stride, pad;
  };
  // 1x1 (stride 1 and 2: the GEMM paths), 3x3 on oneDNN, 3x3 over 64 channels at
  // 7x7 and a 7x7 stem over 3 channels (the im2col weight gradient with AMX), 3x3
  // stride 2 over 64 channels onto 7x7 (im2col on every CPU), and a
  // direct first layer over 1 channel (its channels-last output and gradient are
  // transposed through a scratch buffer).
  for (const Case& c : {Case{2, 16, 6, 24, 1, 1, 0}, Case{2, 16, 7, 32, 1, 2, 0},
                        Case{2, 8, 9, 16, 3, 1, 1}, Case{2, 64, 7, 16, 3, 1, 1},
                        Case{2, 64, 14, 16, 3, 2, 1},
                        Case{2, 32, 8, 16, 3, 2, 1}, Case{1, 3, 15, 8, 7, 2, 3},
                        Case{2, 1, 10, 8, 3, 1, 1}}) {
    CAPTURE(c.c_in);
    CAPTURE(c.k);
    CAPTURE(c.stride);
    const ls::Tensor x = bf16_randn({c.n, c.c_in, c.h, c.h});
    const ls::Tensor w = bf16_randn({c.c_out, c.c_in, c.k, c.k});
    const ls::Tensor x_cl = nv::channels_last(x);
    const nv::ConvGeometry g = nv::make_conv_geometry(x, w, ls::Tensor(), {c.stride, c.stride},
                                                      {c.pad, c.pad}, {1, 1}, 1, "test");
    nv::ConvBf16SavedInput saved, saved_cl;
    const ls::Tensor y = nv::conv2d_bf16_forward(g, x, w, ls::Tensor(), &saved);
    const ls::Tensor y_cl = nv::conv2d_bf16_forward(g, x_cl, w, ls::Tensor(), &saved_cl);
    CHECK(nv::equal(y, y_cl));
    // An NCHW input keeps NCHW, except a network's first layer (few channels),
    // whose output starts the channels-last chain; a channels-last input stays so.
    const bool starts_chain = nv::conv_bf16_channels_last() && c.c_in <= nv::kImageChannels;
    CHECK((!starts_chain ? y.is_contiguous() : nv::is_channels_last(y)));
    CHECK(in_conv_order(y_cl));
    {  // against the float32 reference
      const ls::Tensor ref = nv::conv2d_forward(nv::to_dtype(x, ls::kFloat32), nv::to_dtype(w, ls::kFloat32),
                                                ls::Tensor(), {c.stride, c.stride}, {c.pad, c.pad},
                                                {1, 1}, 1);
      CHECK(relative_error(nv::to_dtype(y, ls::kFloat32), ref) < 8e-3);
    }
    const ls::Tensor gy = bf16_randn(y.sizes());
    const ls::Tensor gy_cl = nv::channels_last(gy);
    auto [gx, gw, gb] = nv::conv2d_bf16_backward(g, gy, saved, w, ls::kBFloat16, true, true, true);
    auto [gx2, gw2, gb2] =
        nv::conv2d_bf16_backward(g, gy_cl, saved_cl, w, ls::kBFloat16, true, true, true);
    CHECK(nv::equal(gx, gx2));
    CHECK(nv::equal(gw, gw2));
    CHECK(nv::equal(gb, gb2));
    CHECK(gx.is_contiguous());  // dx takes dy's order
    CHECK(nv::is_channels_last(gx2));
    CHECK(gw.is_contiguous());
    auto [rgx, rgw, rgb] = nv::conv2d_backward(
        nv::to_dtype(gy, ls::kFloat32), nv::to_dtype(x, ls::kFloat32), nv::to_dtype(w, ls::kFloat32),
        {c.stride, c.stride}, {c.pad, c.pad}, {1, 1}, 1, true, true, true);
    CHECK(relative_error(nv::to_dtype(gx, ls::kFloat32), rgx) < 8e-3);
    CHECK(relative_error(gw, rgw) < 1e-4);
    CHECK(relative_error(gb, rgb) < 1e-5);
    // A float32 input gradient, asked for, in the same order.
    auto [gx32, gw_unused, gb_unused] =
        nv::conv2d_bf16_backward(g, gy_cl, saved_cl, w, ls::kFloat32, true, false, false);
    CHECK(gx32.dtype() == ls::kFloat32);
    CHECK(relative_error(gx32, rgx) < 8e-3);
  }
}

TEST_CASE("conv2d_bf16: the input gradient as forward convolutions, rectangular kernel, strides") {
  // Note [bf16 input gradient as a forward convolution]: the kernel transposed and
  // flipped, padding kH - 1 - pH by kW - 1 - pW at stride 1; at stride (2, 3) six
  // phase convolutions, each over its own taps, filling every 2nd row and 3rd
  // column. A 3x5 kernel on 9 x 11 tells the two axes, the flips and uneven phases apart.
  ls::manual_seed(8);
  struct Case {
    ls::IntList stride, pad;
  };
  for (const Case& c : {Case{{1, 1}, {2, 1}}, Case{{1, 1}, {0, 3}}, Case{{2, 3}, {1, 2}},
                        Case{{2, 2}, {1, 1}}}) {
    CAPTURE(c.stride[1]);
    CAPTURE(c.pad[0]);
    for (bool cl : {true, false}) {
      CAPTURE(cl);
      ls::Tensor x = bf16_randn({2, 8, 9, 11});
      if (cl) x = nv::channels_last(x);
      const ls::Tensor w = bf16_randn({12, 8, 3, 5});
      const nv::ConvGeometry g = nv::make_conv_geometry(nv::to_dtype(x, ls::kFloat32), nv::to_dtype(w, ls::kFloat32),
                                                        ls::Tensor(), c.stride, c.pad, {1, 1}, 1, "test");
      ls::Tensor gy = bf16_randn({2, 12, g.oh, g.ow});
      if (cl) gy = nv::channels_last(gy);
      // With channels-last off the forward would return NCHW: the primitive keeps dx then.
      const bool enabled = ls::env_flag("LOCKSTEP_BF16_DGRAD_FORWARD", true);  // the A/B switch
      // ... and a oneDNN bf16 path: none without its bf16 kernels (Note [bf16 without
      // oneDNN kernels]), where the float32 backward makes dx.
      REQUIRE(nv::conv_bf16_input_grad_as_forward(g, gy, ls::kBFloat16) ==
              (enabled && nv::onednn_detail::has_bf16() && (nv::conv_bf16_channels_last() || !cl)));
      if (!nv::conv_bf16_input_grad_as_forward(g, gy, ls::kBFloat16)) continue;
      const ls::Tensor gx = nv::conv2d_bf16_input_grad_as_forward(g, gy, w);
      CHECK((cl ? nv::is_channels_last(gx) : gx.is_contiguous()));  // dy's order
      CHECK(gx.sizes() == x.sizes());
      auto [rgx, rgw, rgb] = nv::conv2d_backward(nv::to_dtype(gy, ls::kFloat32), nv::to_dtype(x, ls::kFloat32),
                                                 nv::to_dtype(w, ls::kFloat32), c.stride, c.pad, {1, 1}, 1,
                                                 true, false, false);
      CHECK(relative_error(nv::to_dtype(gx, ls::kFloat32), rgx) < 8e-3);
    }
  }
}

TEST_CASE("conv2d under autocast keeps its bf16 input for backward with a version check") {
  ls::manual_seed(4);
  ls::Tensor w = ls::randn({8, 16, 1, 1}) * 0.2;
  w.requires_grad_(true);
  // A bf16 activation in the order the convolutions return: the kernel keeps it as is.
  const auto activation = [](const ls::Tensor& t) {
    return nv::conv_bf16_channels_last() ? nv::channels_last(t) : nv::contiguous(t);
  };
  ls::Tensor x = activation(bf16_randn({2, 16, 5, 5}));
  ls::Tensor loss;
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    loss = ls::conv2d(x, w, ls::Tensor()).to(ls::kFloat32).sum();
  }
  nv::binary_scalar_(nv::BinaryOp::Mul, x, 2.0);  // an in-place change the op did not see
  x.bump_version();
  CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("modified by an in-place operation"),
                       ls::Error);
  // Unchanged, the same graph computes the weight gradient of the bf16 product.
  ls::Tensor x2 = activation(bf16_randn({2, 16, 5, 5}));
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    loss = ls::conv2d(x2, w, ls::Tensor()).to(ls::kFloat32).sum();
  }
  loss.backward();
  REQUIRE(w.grad().defined());
  const ls::Tensor ref = nv::sum(nv::to_dtype(x2, ls::kFloat32), {0, 2, 3}, false);  // d/dw of sum
  CHECK(relative_error(nv::reshape(w.grad(), {8, 16}).select(0, 3), ref) < 1e-5);
}

TEST_CASE("max_pool2d: a channels-last bf16 image pools in its order, bit for bit the NCHW result") {
  ls::manual_seed(5);
  struct Case {
    int64_t n, c, h, w, k, s, p;
  };
  // ResNet's stem pool, a 2x2 pool, C not a multiple of 16, and windows cut by the border;
  // 2x2 pools that tile the image (the select backward of Note [Channel-vector max-pool in
  // AVX-512]) with a row and a column outside every window, and C = 20 (a masked tail).
  for (const Case& c : {Case{2, 20, 9, 11, 3, 2, 1}, Case{1, 64, 8, 8, 2, 2, 0},
                        Case{2, 3, 7, 5, 3, 1, 1}, Case{3, 32, 7, 7, 2, 2, 0},
                        Case{2, 48, 6, 9, 2, 2, 0}, Case{2, 20, 5, 4, 2, 2, 0}}) {
    CAPTURE(c.c);
    CAPTURE(c.k);
    // Small integers: many ties, which must take the first maximum in both orders.
    ls::Tensor x = nv::to_dtype(ls::randint(-3, 4, {c.n, c.c, c.h, c.w}), ls::kBFloat16);
    nv::fill_(x.select(0, 0).select(0, 1).select(0, 2), std::numeric_limits<double>::quiet_NaN());
    const ls::Tensor x_cl = nv::channels_last(x);
    auto [y, idx] = nv::max_pool2d_forward(x, {c.k, c.k}, {c.s, c.s}, {c.p, c.p});
    auto [y_cl, idx_cl] = nv::max_pool2d_forward(x_cl, {c.k, c.k}, {c.s, c.s}, {c.p, c.p});
    CHECK(nv::is_channels_last(y_cl));
    CHECK(nv::is_channels_last(idx_cl));
    CHECK(nv::equal(nv::contiguous(idx_cl), idx));
    // Same bits (NaN included): compare the raw bf16 patterns.
    const ls::Tensor a = nv::contiguous(y), b = nv::contiguous(y_cl);
    CHECK(std::memcmp(a.raw_data(), b.raw_data(), a.numel() * sizeof(ls::BFloat16)) == 0);
    ls::Tensor gy = bf16_randn(y.sizes());
    nv::fill_(gy.select(0, 0).select(0, 0), -0.0);  // the sums turn -0 into +0 in both orders
    const ls::Tensor gx = nv::max_pool2d_backward(gy, idx, x.sizes());
    const ls::IntList tile = nv::max_pool2d_tile({c.k, c.k}, {c.s, c.s}, {c.p, c.p});
    CHECK(tile.empty() == (c.k != c.s || c.p != 0));
    const ls::Tensor gx_cl = nv::max_pool2d_backward(nv::channels_last(gy), idx_cl, x.sizes(), tile);
    const ls::Tensor gx_mixed = nv::max_pool2d_backward(gy, idx_cl, x.sizes());  // NCHW dy
    CHECK(nv::is_channels_last(gx_cl));
    const ls::Tensor ga = nv::contiguous(gx), gb = nv::contiguous(gx_cl), gm = nv::contiguous(gx_mixed);
    CHECK(std::memcmp(ga.raw_data(), gb.raw_data(), ga.numel() * sizeof(ls::BFloat16)) == 0);
    CHECK(std::memcmp(ga.raw_data(), gm.raw_data(), ga.numel() * sizeof(ls::BFloat16)) == 0);
    if (tile.empty()) {
      // Indices of overlapping windows under a tile they do not fit: an error, not a wrong gradient.
      // 3x3 stride 2 under a 2x2 tile: 5 x 6 tiles do not fit in 9 x 11; stride 1 under a
      // 1x1 tile: they fit, but the indices point outside them.
      CHECK_THROWS_WITH(nv::max_pool2d_backward(nv::channels_last(gy), idx_cl, x.sizes(), {c.s, c.s}),
                        doctest::Contains(c.s == 2 ? "do not fit" : "lies outside its"));
    }
  }
}
