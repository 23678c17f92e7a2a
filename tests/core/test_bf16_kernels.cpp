// tests/core/test_bf16_kernels.cpp — every bfloat16 kernel against its float32
// reference on bf16-rounded inputs: the GEMM (oneDNN and loops), the
// convolution passes, and the elementwise kernels of Note [bfloat16 elementwise].
//
// Tolerances: a bf16 result is the float32 result rounded once, so it is within
// 2^-8 (0.4%) relative of it; oneDNN may sum in another order than the
// reference, which moves a float32 sum by ~1e-6 relative. Each check states its bound.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <limits>
#include <vector>

#include "core/factory.h"
#include "core/native/conv_bf16.h"
#include "core/native/copy_kernels.h"
#include "core/native/gemm.h"
#include "core/native/fast/onednn_engine.h"
#include "core/native/gemm_bf16.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/native/nn_kernels_transformer.h"
#include "core/rng.h"
#include "core/shape.h"
#include "tests/support/backend_scope.h"
#include "tests/support/compare.h"

namespace ls = lockstep;
namespace nv = lockstep::native;
using ls::BFloat16;
using ls::testing::GemmBackendScope;
using ls::testing::relative_error;

namespace {

// A random (sizes) tensor already representable in bf16, as float32 and as bf16.
struct Pair {
  ls::Tensor f32, bf16;
};
Pair random_pair(const ls::IntList& sizes) {
  ls::Tensor b = nv::to_dtype(ls::randn(sizes), ls::kBFloat16);
  return {nv::to_dtype(b, ls::kFloat32), b};
}

// Switches the process-wide convolution backend for one scope.
struct ConvBackendScope {
  nv::ConvBackend saved = nv::conv_backend();
  explicit ConvBackendScope(nv::ConvBackend b) { nv::set_conv_backend(b); }
  ~ConvBackendScope() { nv::set_conv_backend(saved); }
};

}  // namespace

TEST_CASE("gemm_bf16: oneDNN equals the float32 GEMM of the same bf16 values, every transpose") {
  ls::manual_seed(1);
  const int64_t m = 37, n = 29, k = 70;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      Pair a = random_pair(ta ? ls::IntList{k, m} : ls::IntList{m, k});
      Pair b = random_pair(tb ? ls::IntList{n, k} : ls::IntList{k, n});
      const int64_t lda = ta ? m : k, ldb = tb ? k : n;
      ls::Tensor ref = ls::zeros({m, n});
      nv::gemm_reference<float>(ta, tb, m, n, k, 1.0f, a.f32.data_ptr<float>(), lda,
                                b.f32.data_ptr<float>(), ldb, 0.0f, ref.data_ptr<float>(), n);
      ls::Tensor c32 = ls::zeros({m, n});
      nv::gemm_bf16<float>(ta, tb, m, n, k, a.bf16.data_ptr<BFloat16>(), lda,
                           b.bf16.data_ptr<BFloat16>(), ldb, 0.0f, c32.data_ptr<float>(), n);
      CHECK(relative_error(c32, ref) < 1e-5);
      ls::Tensor c16 = nv::empty({m, n}, ls::kBFloat16);
      nv::gemm_bf16<BFloat16>(ta, tb, m, n, k, a.bf16.data_ptr<BFloat16>(), lda,
                              b.bf16.data_ptr<BFloat16>(), ldb, 0.0f, c16.data_ptr<BFloat16>(), n);
      CHECK(relative_error(nv::to_dtype(c16, ls::kFloat32), ref) < 8e-3);
      // The loops agree with oneDNN as closely.
      ls::Tensor loops = ls::zeros({m, n});
      nv::gemm_bf16_reference<float>(ta, tb, m, n, k, a.bf16.data_ptr<BFloat16>(), lda,
                                     b.bf16.data_ptr<BFloat16>(), ldb, 0.0f,
                                     loops.data_ptr<float>(), n);
      CHECK(relative_error(loops, c32) < 1e-5);
    }
  }
}

TEST_CASE("gemm_bf16_via_float32: the loops' values, every transpose, beta, bias and wide rows") {
  // Note [bf16 without oneDNN kernels]: the path a CPU without oneDNN bf16 kernels
  // takes, called directly so that every machine checks it.
  ls::manual_seed(5);
  const int64_t m = 23, n = 19, k = 41, ldc = 21;
  Pair bias = random_pair({n});
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (float beta : {0.0f, 0.5f}) {
        CAPTURE(ta);
        CAPTURE(tb);
        CAPTURE(beta);
        // A and B stored two columns wider than they are read.
        const int64_t lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 2;
        Pair a = random_pair({ta ? k : m, lda});
        Pair b = random_pair({tb ? n : k, ldb});
        const Pair c0 = random_pair({m, ldc});
        ls::Tensor want = nv::clone(c0.f32), got = nv::clone(c0.f32);
        nv::gemm_bf16_reference<float>(ta, tb, m, n, k, a.bf16.data_ptr<BFloat16>(), lda,
                                       b.bf16.data_ptr<BFloat16>(), ldb, beta,
                                       want.data_ptr<float>(), ldc, bias.bf16.data_ptr<BFloat16>());
        nv::gemm_bf16_via_float32<float>(ta, tb, m, n, k, a.bf16.data_ptr<BFloat16>(), lda,
                                         b.bf16.data_ptr<BFloat16>(), ldb, beta,
                                         got.data_ptr<float>(), ldc, bias.bf16.data_ptr<BFloat16>());
        CHECK(relative_error(got, want) < 1e-5);  // columns n..ldc untouched in both
        ls::Tensor want16 = nv::clone(c0.bf16), got16 = nv::clone(c0.bf16);
        nv::gemm_bf16_reference<BFloat16>(ta, tb, m, n, k, a.bf16.data_ptr<BFloat16>(), lda,
                                          b.bf16.data_ptr<BFloat16>(), ldb, beta,
                                          want16.data_ptr<BFloat16>(), ldc);
        nv::gemm_bf16_via_float32<BFloat16>(ta, tb, m, n, k, a.bf16.data_ptr<BFloat16>(), lda,
                                            b.bf16.data_ptr<BFloat16>(), ldb, beta,
                                            got16.data_ptr<BFloat16>(), ldc);
        CHECK(relative_error(nv::to_dtype(got16, ls::kFloat32), nv::to_dtype(want16, ls::kFloat32)) <
              8e-3);
      }
    }
  }
  // Which path gemm_bf16 takes follows the probe.
  const nv::GemmImpl impl = nv::choose_gemm(nv::GemmBackend::OneDNN, ls::kBFloat16, false, false, 4, 4, 4, false);
  CHECK(impl == (nv::onednn_detail::has_bf16() ? nv::GemmImpl::Bf16OneDNN : nv::GemmImpl::Bf16ViaFloat32));
}

TEST_CASE("gemm_bf16: beta adds onto C, wide leading dims are respected, shapes are cached") {
  ls::manual_seed(2);
  const int64_t m = 8, n = 5, k = 12, lda = 20, ldc = 9;
  Pair a = random_pair({m, lda});
  Pair b = random_pair({k, n});
  ls::Tensor c = ls::full({m, ldc}, 2.0);
  ls::Tensor ref = ls::full({m, ldc}, 2.0);
  nv::gemm_reference<float>(false, false, m, n, k, 1.0f, a.f32.data_ptr<float>(), lda,
                            b.f32.data_ptr<float>(), n, 1.0f, ref.data_ptr<float>(), ldc);
  nv::gemm_bf16<float>(false, false, m, n, k, a.bf16.data_ptr<BFloat16>(), lda,
                       b.bf16.data_ptr<BFloat16>(), n, 1.0f, c.data_ptr<float>(), ldc);
  CHECK(relative_error(c, ref) < 1e-5);  // columns n..ldc stay 2 in both
  const int64_t built = nv::gemm_bf16_primitives_built();
  nv::gemm_bf16<float>(false, false, m, n, k, a.bf16.data_ptr<BFloat16>(), lda,
                       b.bf16.data_ptr<BFloat16>(), n, 1.0f, c.data_ptr<float>(), ldc);
  CHECK(nv::gemm_bf16_primitives_built() == built);
  CHECK_THROWS_WITH_AS(nv::gemm_bf16<float>(false, false, m, n, k, a.bf16.data_ptr<BFloat16>(),
                                            2, b.bf16.data_ptr<BFloat16>(), n, 0.0f,
                                            c.data_ptr<float>(), ldc),
                       doctest::Contains("leading dimensions"), ls::Error);
}

TEST_CASE("gemm_bf16: a bias is added to every row, in the float32 sum, as the loops do") {
  // Linear's bias under autocast is oneDNN's bias argument: C = A B + bias, one
  // rounding at the end. Against the loops (the definition) and against the
  // former formulation, C preset to the bias and beta = 1.
  ls::manual_seed(3);
  const int64_t m = 33, n = 40, k = 50;
  Pair a = random_pair({m, k});
  Pair b = random_pair({k, n});
  Pair bias = random_pair({n});
  for (bool tb : {false, true}) {
    CAPTURE(tb);
    const ls::Tensor bt = tb ? nv::contiguous(nv::transpose(b.bf16, 0, 1)) : b.bf16;  // (n, k) when tb
    const int64_t ldb = tb ? k : n;
    ls::Tensor fused = nv::empty({m, n}, ls::kBFloat16), loops = nv::empty({m, n}, ls::kBFloat16);
    nv::gemm_bf16<BFloat16>(false, tb, m, n, k, a.bf16.data_ptr<BFloat16>(), k, bt.data_ptr<BFloat16>(), ldb,
                            0.0f, fused.data_ptr<BFloat16>(), n, bias.bf16.data_ptr<BFloat16>());
    nv::gemm_bf16_reference<BFloat16>(false, tb, m, n, k, a.bf16.data_ptr<BFloat16>(), k, bt.data_ptr<BFloat16>(),
                                      ldb, 0.0f, loops.data_ptr<BFloat16>(), n, bias.bf16.data_ptr<BFloat16>());
    ls::Tensor preset = nv::empty({m, n}, ls::kBFloat16);
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(preset.data_ptr<BFloat16>() + i * n, bias.bf16.raw_data(), n * sizeof(BFloat16));
    }
    nv::gemm_bf16<BFloat16>(false, tb, m, n, k, a.bf16.data_ptr<BFloat16>(), k, bt.data_ptr<BFloat16>(), ldb,
                            1.0f, preset.data_ptr<BFloat16>(), n);
    const ls::Tensor f = nv::to_dtype(fused, ls::kFloat32);
    // One bf16 rounding apart at most (the sums may run in another order).
    CHECK(relative_error(f, nv::to_dtype(loops, ls::kFloat32)) < 8e-3);
    CHECK(relative_error(f, nv::to_dtype(preset, ls::kFloat32)) < 8e-3);
    // And the bias is really in: without it the product differs by it.
    ls::Tensor bare = nv::empty({m, n}, ls::kBFloat16);
    nv::gemm_bf16<BFloat16>(false, tb, m, n, k, a.bf16.data_ptr<BFloat16>(), k, bt.data_ptr<BFloat16>(), ldb,
                            0.0f, bare.data_ptr<BFloat16>(), n);
    CHECK(relative_error(nv::to_dtype(bare, ls::kFloat32), f) > 1e-2);
  }
}

TEST_CASE("sum_rows_to_float: the float32 sum over rows, bit for bit, bf16 or float32 input") {
  // A bias gradient under autocast: sum(to_dtype(g, kFloat32), {0}) without the copy.
  ls::manual_seed(4);
  const ls::Tensor g = nv::binary_scalar(nv::BinaryOp::Mul, ls::randn({300, 70}), 1000.0);
  for (ls::ScalarType dt : {ls::kBFloat16, ls::kFloat32}) {
    const ls::Tensor x = nv::to_dtype(g, dt);
    const ls::Tensor fast = nv::sum_rows_to_float(x), ref = nv::sum(nv::to_dtype(x, ls::kFloat32), {0}, false);
    REQUIRE(fast.sizes() == ref.sizes());
    CHECK(fast.dtype() == ls::kFloat32);
    CHECK(std::memcmp(fast.raw_data(), ref.raw_data(), fast.nbytes()) == 0);
  }
  CHECK_THROWS_WITH_AS(nv::sum_rows_to_float(ls::randn({2, 3, 4})), doctest::Contains("2-d"), ls::Error);
}

TEST_CASE("bmm and matmul on bfloat16 tensors: float32 accumulation, one rounding") {
  ls::manual_seed(3);
  Pair a = random_pair({6, 16, 32});
  Pair b = random_pair({6, 32, 24});
  ls::Tensor ref = nv::bmm(a.f32, b.f32);
  ls::Tensor got = nv::bmm(a.bf16, b.bf16);
  CHECK(got.dtype() == ls::kBFloat16);
  CHECK(relative_error(nv::to_dtype(got, ls::kFloat32), ref) < 8e-3);
  // A transposed view is read in place, as for float32.
  ls::Tensor bt = nv::transpose(nv::contiguous(nv::transpose(b.bf16, 1, 2)), 1, 2);
  CHECK(relative_error(nv::to_dtype(nv::matmul(a.bf16, bt), ls::kFloat32), ref) < 8e-3);
}

TEST_CASE("conv2d_bf16: oneDNN passes equal the float32 reference on bf16 inputs") {
  ls::manual_seed(4);
  struct Case {
    int64_t n, c_in, h, c_out, k, stride, pad, groups;
  };
  // Note [bf16 backward-weights as one GEMM]: with AMX, 3x3 over 64 channels at
  // 7x7 and the 7x7 stem-like kernel take the im2col GEMM; on every CPU the 3x3
  // stride-2 layer over 64 channels onto 7x7 does; 3x3 over 8 channels the primitive.
  for (const Case& c : {Case{2, 8, 9, 16, 3, 1, 1, 1}, Case{2, 16, 8, 8, 1, 2, 0, 1},
                        Case{1, 3, 15, 8, 7, 2, 3, 1}, Case{2, 8, 6, 8, 3, 1, 1, 2},
                        Case{2, 64, 7, 16, 3, 1, 1, 1}, Case{2, 64, 14, 16, 3, 2, 1, 1},
                        // Note [bf16 direct convolution for few input channels]: 1-3 channels
                        Case{2, 1, 12, 8, 3, 1, 1, 1}, Case{2, 3, 10, 8, 3, 1, 1, 1},
                        Case{1, 1, 9, 4, 5, 1, 2, 1}, Case{2, 2, 7, 5, 3, 1, 0, 1},
                        Case{3, 16, 5, 24, 1, 1, 0, 1},      // 1x1, small P: one batch-wide dW GEMM
                        Case{2, 8, 40, 16, 1, 1, 0, 1},      // 1x1, P = 1600: dW per image
                        Case{2, 16, 30, 16, 3, 1, 1, 1}}) {  // P = 900: oneDNN's backward-weights
    CAPTURE(c.k);
    CAPTURE(c.stride);
    CAPTURE(c.groups);
    Pair x = random_pair({c.n, c.c_in, c.h, c.h});
    Pair w = random_pair({c.c_out, c.c_in / c.groups, c.k, c.k});
    ls::Tensor bias = ls::randn({c.c_out});
    const ls::IntList stride{c.stride, c.stride}, pad{c.pad, c.pad}, dil{1, 1};
    const nv::ConvGeometry g =
        nv::make_conv_geometry(x.bf16, w.bf16, ls::Tensor(), stride, pad, dil, c.groups, "test");
    ls::Tensor ref_y, y;
    {
      ConvBackendScope scope(nv::ConvBackend::Reference);
      ref_y = nv::conv2d_forward(x.f32, w.f32, bias, stride, pad, dil, c.groups);
      // The bf16 reference is the float32 reference rounded once.
      ls::Tensor y_ref16 = nv::conv2d_bf16_forward(g, x.bf16, w.bf16, bias);
      CHECK(nv::equal(y_ref16, nv::to_dtype(ref_y, ls::kBFloat16)));
    }
    nv::ConvBf16SavedInput saved;  // the oneDNN path's own reordered copy of x
    y = nv::conv2d_bf16_forward(g, x.f32, w.bf16, bias, &saved);  // float32 in: converted inside
    CHECK(y.dtype() == ls::kBFloat16);
    CHECK(nv::equal(y, nv::conv2d_bf16_forward(g, x.bf16, w.bf16, bias)));
    CHECK(relative_error(nv::to_dtype(y, ls::kFloat32), ref_y) < 8e-3);

    Pair gy = random_pair(y.sizes());
    auto [rgx, rgw, rgb] = [&] {
      ConvBackendScope scope(nv::ConvBackend::Reference);
      return nv::conv2d_backward(gy.f32, x.f32, w.f32, stride, pad, dil, c.groups, true, true,
                                 true);
    }();
    auto [gx, gw, gb] =
        nv::conv2d_bf16_backward(g, gy.bf16, saved, w.bf16, ls::kFloat32, true, true, true);
    CHECK(gx.dtype() == ls::kFloat32);  // the input's dtype, asked for
    CHECK(gw.dtype() == ls::kFloat32);  // weight gradients always float32
    CHECK(relative_error(gx, rgx) < 8e-3);  // backward-data rounds to bf16 before widening
    CHECK(relative_error(gw, rgw) < 1e-4);
    CHECK(relative_error(gb, rgb) < 1e-5);
    // A plain saved input gives the same weight gradient as the reordered one.
    auto [gx16, gw_plain, gb_none] = nv::conv2d_bf16_backward(
        g, gy.bf16, nv::ConvBf16SavedInput{ls::Tensor(), x.bf16}, w.bf16, ls::kBFloat16, true,
        true, false);
    // oneDNN's primitive reads either copy the same way; the float32 path a CPU without
    // bf16 kernels takes (Note [bf16 without oneDNN kernels]) may pick another
    // backward-weights kernel without the bias, which sums in another order.
    if (nv::onednn_detail::has_bf16()) {
      CHECK(nv::equal(gw_plain, gw));
    } else {
      CHECK(relative_error(gw_plain, gw) < 1e-5);
    }
    CHECK_FALSE(gb_none.defined());
    CHECK(gx16.dtype() == ls::kBFloat16);
    CHECK(relative_error(nv::to_dtype(gx16, ls::kFloat32), rgx) < 8e-3);
  }
  CHECK(nv::conv2d_bf16_impl(nv::make_conv_geometry(nv::zeros({1, 8, 8, 8}, ls::kBFloat16),
                                                    nv::zeros({8, 8, 3, 3}, ls::kBFloat16), ls::Tensor(),
                                                    {1, 1}, {1, 1}, {1, 1}, 1, "test"))
            .size() > 0);
}

TEST_CASE("bf16 elementwise kernels are the float32 kernel on bf16 inputs, rounded once") {
  ls::manual_seed(5);
  Pair a = random_pair({3, 70});
  Pair b = random_pair({70});  // broadcast along rows
  auto rounded = [](const ls::Tensor& t) { return nv::to_dtype(t, ls::kBFloat16); };
  auto check_same = [&](const ls::Tensor& got, const ls::Tensor& ref32) {
    CHECK(got.dtype() == ls::kBFloat16);
    CHECK(nv::equal(got, rounded(ref32)));
  };
  using nv::BinaryOp;
  for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div,
                      BinaryOp::Maximum}) {
    CAPTURE(nv::binary_op_name(op));
    check_same(nv::binary(op, a.bf16, b.bf16), nv::binary(op, a.f32, b.f32));
  }
  check_same(nv::binary_scalar(BinaryOp::Mul, a.bf16, 0.125),
             nv::binary_scalar(BinaryOp::Mul, a.f32, 0.125));
  check_same(nv::binary_scalar(BinaryOp::Add, a.bf16, 0.3),  // the scalar is not truncated
             nv::binary_scalar(BinaryOp::Add, a.f32, static_cast<float>(BFloat16(0.3f))));
  check_same(nv::unary(nv::UnaryOp::Relu, a.bf16), nv::unary(nv::UnaryOp::Relu, a.f32));
  check_same(nv::unary(nv::UnaryOp::Gelu, a.bf16), nv::unary(nv::UnaryOp::Gelu, a.f32));
  check_same(nv::unary(nv::UnaryOp::Tanh, a.bf16), nv::unary(nv::UnaryOp::Tanh, a.f32));
  Pair g = random_pair({3, 70});
  check_same(nv::relu_backward(g.bf16, a.bf16), nv::relu_backward(g.f32, a.f32));
  check_same(nv::gelu_backward(g.bf16, a.bf16), nv::gelu_backward(g.f32, a.f32));
  // Mixed bf16 + float32 promotes to float32, exactly.
  ls::Tensor mixed = nv::binary(BinaryOp::Add, a.bf16, b.f32);
  CHECK(mixed.dtype() == ls::kFloat32);
  CHECK(nv::equal(mixed, nv::binary(BinaryOp::Add, a.f32, b.f32)));
  // In place, as the engine sums gradients.
  ls::Tensor acc = nv::clone(a.bf16);
  nv::binary_(BinaryOp::Add, acc, g.bf16);
  check_same(acc, nv::binary(BinaryOp::Add, a.f32, g.f32));
}

TEST_CASE("bf16 elementwise: blocked contiguous runs and strided runs agree, NaN and inf included") {
  // Contiguous runs go through float buffers of 512 elements (run_widened in
  // core/native/elementwise_loop.h), strided ones element by element: rows of
  // 1100 cross two block boundaries, and the transposed operand takes the other loop.
  ls::manual_seed(8);
  Pair a = random_pair({3, 1100});
  float* ap = a.f32.data_ptr<float>();
  ap[5] = std::numeric_limits<float>::quiet_NaN();
  ap[700] = std::numeric_limits<float>::infinity();
  ap[1500] = -std::numeric_limits<float>::infinity();
  a.bf16 = nv::to_dtype(a.f32, ls::kBFloat16);
  Pair g = random_pair({3, 1100});
  auto same_bits = [](const ls::Tensor& x, const ls::Tensor& y) {
    const ls::Tensor xc = nv::contiguous(x), yc = nv::contiguous(y);
    REQUIRE(xc.numel() == yc.numel());
    const BFloat16* xp = xc.data_ptr<BFloat16>();
    const BFloat16* yp = yc.data_ptr<BFloat16>();
    // A NaN's sign is not specified by IEEE 754 (vector and scalar x86 code give
    // different ones): two NaNs agree, every other value to the bit.
    const auto is_nan = [](BFloat16 v) { return (v.bits & 0x7f80) == 0x7f80 && (v.bits & 0x7f) != 0; };
    for (int64_t i = 0; i < xc.numel(); ++i) {
      if (xp[i].bits != yp[i].bits && !(is_nan(xp[i]) && is_nan(yp[i]))) {
        FAIL_CHECK("element " << i << ": bits " << xp[i].bits << " vs " << yp[i].bits);
        return;
      }
    }
  };
  const ls::Tensor at = nv::transpose(nv::contiguous(nv::transpose(a.bf16, 0, 1)), 0, 1);  // strided view
  CHECK(!at.is_contiguous());
  for (nv::UnaryOp op : {nv::UnaryOp::Gelu, nv::UnaryOp::Exp, nv::UnaryOp::Sigmoid, nv::UnaryOp::Erf}) {
    CAPTURE(nv::unary_op_name(op));
    const ls::Tensor blocked = nv::unary(op, a.bf16);
    same_bits(blocked, nv::to_dtype(nv::unary(op, a.f32), ls::kBFloat16));
    same_bits(blocked, nv::unary(op, at));
  }
  same_bits(nv::gelu_backward(g.bf16, a.bf16), nv::to_dtype(nv::gelu_backward(g.f32, a.f32), ls::kBFloat16));
  {  // Note [bfloat16 ReLU on bits]: -0, +0, NaN in x and a NaN gradient, against float32
    ls::Tensor x32 = nv::clone(a.f32), g32 = nv::clone(g.f32);
    float* xp = x32.data_ptr<float>();
    xp[10] = -0.0f;
    xp[11] = 0.0f;
    xp[12] = -std::numeric_limits<float>::quiet_NaN();
    g32.data_ptr<float>()[20] = std::numeric_limits<float>::quiet_NaN();
    xp[20] = 1.0f;
    const ls::Tensor x16 = nv::to_dtype(x32, ls::kBFloat16), g16 = nv::to_dtype(g32, ls::kBFloat16);
    same_bits(nv::unary(nv::UnaryOp::Relu, x16),
              nv::to_dtype(nv::unary(nv::UnaryOp::Relu, nv::to_dtype(x16, ls::kFloat32)), ls::kBFloat16));
    same_bits(nv::relu_backward(g16, x16),
              nv::to_dtype(nv::relu_backward(nv::to_dtype(g16, ls::kFloat32),
                                             nv::to_dtype(x16, ls::kFloat32)),
                           ls::kBFloat16));
    const ls::Tensor xt = nv::transpose(nv::contiguous(nv::transpose(x16, 0, 1)), 0, 1);
    same_bits(nv::unary(nv::UnaryOp::Relu, xt), nv::unary(nv::UnaryOp::Relu, x16));  // strided loop
  }
  same_bits(nv::binary(nv::BinaryOp::Mul, a.bf16, g.bf16),
            nv::to_dtype(nv::binary(nv::BinaryOp::Mul, a.f32, g.f32), ls::kBFloat16));
  same_bits(nv::binary(nv::BinaryOp::Mul, at, g.bf16), nv::binary(nv::BinaryOp::Mul, a.bf16, g.bf16));
  const ls::Tensor gelu = nv::unary(nv::UnaryOp::Gelu, a.bf16);
  const BFloat16* gp = gelu.data_ptr<BFloat16>();
  CHECK(std::isnan(static_cast<float>(gp[5])));
  CHECK(static_cast<float>(gp[700]) == std::numeric_limits<float>::infinity());
}

TEST_CASE("copy_: the flat, row and tiled-transpose loops equal the element walk, every dtype pair") {
  // Note [Copy loops] (core/native/copy_kernels.h): each view below takes one
  // loop (checked with copy_path), and its copy must equal, byte for byte,
  // copy_reference_ (the offset walk) into the same destination. Round one:
  // values in [0, 255] (every target, integers too: a float out of an integer's
  // range converts undefined); round two: signed, huge, tiny and non-finite
  // values into the floating types. 80000 elements: several threads' chunks.
  const std::vector<float> in_range = {0.0f, -0.0f, 1.0f, 1.0f + 0x1p-8f, 1.0f + 0x1p-7f + 0x1p-8f, 7.75f, 255.0f};
  const std::vector<float> anything = {-1.5f, 1e-40f, -3e38f, 65504.0f, 70000.0f,
                                       std::numeric_limits<float>::quiet_NaN(),
                                       std::numeric_limits<float>::infinity(),
                                       -std::numeric_limits<float>::infinity()};
  const std::vector<ls::ScalarType> floating = {ls::kFloat32, ls::kFloat64, ls::kFloat16, ls::kBFloat16};
  ls::manual_seed(9);
  for (bool integers : {true, false}) {
    ls::Tensor x = ls::randn({80000});  // float32
    float* xp = x.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      xp[i] = integers ? std::fabs(std::fmod(xp[i] * 100.0f, 255.0f)) : xp[i] * 1000.0f;
    }
    for (size_t i = 0; i < in_range.size(); ++i) xp[i * 997] = in_range[i];
    if (!integers) {
      for (size_t i = 0; i < anything.size(); ++i) xp[41000 + i * 13] = anything[i];
    }
    std::vector<ls::ScalarType> targets = floating;
    if (integers) targets.insert(targets.end(), {ls::kInt64, ls::kInt32, ls::kUInt8, ls::kBool});
    for (ls::ScalarType from : floating) {
      const ls::Tensor src = nv::to_dtype(x, from);
      struct View {
        const char* what;
        ls::Tensor t;
        nv::CopyPath path;
      };
      const std::vector<View> views = {
          {"contiguous", nv::reshape(src, {2, 40000}), nv::CopyPath::Flat},
          {"permuted rows", nv::permute(nv::reshape(src, {4, 100, 200}), {1, 0, 2}), nv::CopyPath::Rows},
          {"transposed 37 x 2162 (tiles cut short)", nv::transpose(nv::reshape(nv::narrow(src, 0, 0, 79994), {2162, 37}), 0, 1),
           nv::CopyPath::Transposed},
          {"batched transposes", nv::transpose(nv::reshape(src, {8, 100, 100}), 1, 2), nv::CopyPath::Transposed},
          {"permuted, no unit stride last", nv::permute(nv::reshape(src, {4, 100, 200}), {2, 0, 1}), nv::CopyPath::Walk},
      };
      for (const View& v : views) {
        for (ls::ScalarType to : targets) {
          const std::string what = std::string(v.what) + ": " + ls::dtype_name(from) + " -> " + ls::dtype_name(to);
          CAPTURE(what);
          ls::Tensor fast = nv::empty(v.t.sizes(), to), ref = nv::empty(v.t.sizes(), to);
          CHECK(nv::copy_path(fast, v.t, v.t.strides()) == v.path);
          nv::copy_(fast, v.t);
          nv::copy_reference_(ref, v.t);
          CHECK(std::memcmp(fast.raw_data(), ref.raw_data(), fast.nbytes()) == 0);
        }
      }
    }
  }
}

TEST_CASE("copy_: between channels-last and NCHW a batch of transposes, between two channels-last flat") {
  // copy_ sees both sides in the destination's memory order (in_dst_order,
  // Note [Copy loops]), so these copies take the tiled loops rather than the
  // walk; each must equal copy_reference_ byte for byte. Shapes cover a single
  // channel, tiles cut short (37 channels, 5 x 7 pixels) and a multiple of 32.
  ls::manual_seed(10);
  const std::vector<ls::IntList> shapes = {{3, 1, 4, 5}, {2, 37, 5, 7}, {4, 64, 6, 6}};
  for (const ls::IntList& shape : shapes) {
    for (ls::ScalarType from : {ls::kFloat32, ls::kBFloat16}) {
      for (ls::ScalarType to : {ls::kFloat32, ls::kBFloat16}) {
        const ls::Tensor nchw = nv::to_dtype(ls::randn(shape), from);
        const ls::Tensor cl = nv::channels_last(nchw);
        struct Case {
          const char* what;
          ls::Tensor dst, src;
          nv::CopyPath path;
        };
        const bool single_channel = shape[1] == 1;  // then NCHW and channels-last are one layout
        const std::vector<Case> cases = {
            {"channels-last -> NCHW", nv::empty(shape, to), cl,
             single_channel ? nv::CopyPath::Flat : nv::CopyPath::Transposed},
            {"NCHW -> channels-last", nv::empty_channels_last(shape, to), nchw,
             single_channel ? nv::CopyPath::Flat : nv::CopyPath::Transposed},
            {"channels-last -> channels-last", nv::empty_channels_last(shape, to), cl, nv::CopyPath::Flat},
            {"NCHW -> a narrowed channels-last view", nv::narrow(nv::empty_channels_last({shape[0], shape[1] + 2, shape[2], shape[3]}, to), 1, 1, shape[1]),
             nchw, nv::CopyPath::Walk},
        };
        for (const Case& c : cases) {
          const std::string what = std::string(c.what) + " " + ls::shape_str(shape) + " " +
                                   ls::dtype_name(from) + " -> " + ls::dtype_name(to);
          CAPTURE(what);
          const auto [d, strides] = nv::in_dst_order(c.dst, c.src.strides());
          if (c.path != nv::CopyPath::Walk) CHECK(nv::copy_path(d, c.src, strides) == c.path);
          ls::Tensor ref = nv::empty(shape, to);
          nv::copy_reference_(ref, c.src);
          nv::copy_(c.dst, c.src);
          CHECK(nv::equal(nv::contiguous(c.dst), ref));
          CHECK(nv::equal(nv::to_dtype(nv::contiguous(c.src), to), ref));
        }
      }
    }
  }
}

TEST_CASE("dropout on bfloat16 keeps the float32 kernel's mask and scale") {
  Pair x = random_pair({4, 100});
  ls::manual_seed(6);
  auto [y32, m32] = nv::dropout_forward(x.f32, 0.25);
  ls::manual_seed(6);
  auto [y16, m16] = nv::dropout_forward(x.bf16, 0.25);
  CHECK(nv::equal(m16, m32));
  CHECK(y16.dtype() == ls::kBFloat16);
  CHECK(nv::equal(y16, nv::to_dtype(y32, ls::kBFloat16)));
  ls::Tensor g = nv::dropout_backward(x.bf16, m16, 0.25);
  CHECK(nv::equal(g, nv::to_dtype(nv::dropout_backward(x.f32, m32, 0.25), ls::kBFloat16)));
}
