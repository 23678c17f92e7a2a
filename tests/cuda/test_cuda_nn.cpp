// tests/cuda/test_cuda_nn.cpp — the CUDA kernels of the neural-network ops
// (core/cuda/cuda_native_nn.h) against their CPU kernels on random inputs:
// GEMMs, linear, convolution, pooling, batch norm (+ ReLU), layer norm,
// embedding, dropout, the losses and add_relu, forward and backward; float64
// gradchecks through the device ops (Tensor::to is differentiable, so the
// finite differences run on the CPU around a CUDA op). Skipped without a GPU
// (Note [Skipping gpu tests]).
// Read before: tests/cuda/cuda_test_util.h, core/cuda/cuda_native_nn.h.
// Read next: tests/cuda/test_cuda_nn_train.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "core/factory.h"
#include "core/native/fused_relu.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/native/nn_kernels_transformer.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/errors.h"
#include "tests/support/gradcheck.h"

namespace nat = lockstep::native;
using Inputs = std::vector<Tensor>;

namespace {

Tensor to_cpu(const Tensor& t) { return nat::to_device(t, ls::Device::cpu()); }

// Tolerances of a float32 / float64 comparison with the CPU kernel.
double rtol_of(ls::ScalarType t) { return t == ls::kFloat64 ? 1e-10 : 1e-4; }
double atol_of(ls::ScalarType t) { return t == ls::kFloat64 ? 1e-10 : 1e-4; }

void check_close(const Tensor& got, const Tensor& want) {
  check_matches(got, want, rtol_of(want.dtype()), atol_of(want.dtype()));
}

const std::vector<ls::ScalarType> kFloats = {ls::kFloat32, ls::kFloat64};

}  // namespace

TEST_CASE("CUDA mm, bmm and matmul match the CPU for transposed, broadcast and vector operands") {
  struct Case {
    IntList a, b;
    bool transpose_a = false, transpose_b = false;
  };
  const std::vector<Case> cases = {{{7, 5}, {5, 3}},
                                   {{5, 7}, {5, 3}, true},
                                   {{7, 5}, {3, 5}, false, true},
                                   {{4, 7, 5}, {4, 5, 3}},
                                   {{2, 1, 3, 4}, {5, 4, 6}},
                                   {{2, 1, 3, 4}, {1, 5, 4, 6}},
                                   {{3, 4, 5}, {5, 2}},
                                   {{5}, {5}},
                                   {{6, 5}, {5}},
                                   {{5}, {5, 6}},
                                   {{2, 3, 5}, {5}},
                                   {{5}, {2, 5, 3}},
                                   {{7, 0}, {0, 3}},
                                   {{3, 2, 4, 5}, {3, 2, 5, 6}}};
  for (ls::ScalarType dtype : kFloats) {
    for (const Case& c : cases) {
      CAPTURE(dtype);
      CAPTURE(ls::shape_str(c.a));
      CAPTURE(ls::shape_str(c.b));
      Tensor a = random_cpu(c.a, dtype), b = random_cpu(c.b, dtype);
      Tensor ga = on_cuda(a), gb = on_cuda(b);
      if (c.transpose_a) a = nat::transpose(a, 0, 1), ga = nat::transpose(ga, 0, 1);
      if (c.transpose_b) b = nat::transpose(b, 0, 1), gb = nat::transpose(gb, 0, 1);
      check_close(nat::matmul(ga, gb), nat::matmul(a, b));
      if (a.dim() == 2 && b.dim() == 2) check_close(nat::mm(ga, gb), nat::mm(a, b));
      if (a.dim() == 3 && b.dim() == 3) check_close(nat::bmm(ga, gb), nat::bmm(a, b));
    }
  }
  // Attention's q @ k^T on permuted views: a (B, H) batch with no single stride.
  for (ls::ScalarType dtype : kFloats) {
    const Tensor q = nat::permute(random_cpu({2, 5, 3, 4}, dtype), {0, 2, 1, 3});   // (2, 3, 5, 4)
    const Tensor kt = nat::permute(random_cpu({2, 5, 3, 4}, dtype), {0, 2, 3, 1});  // (2, 3, 4, 5)
    const Tensor gq = nat::permute(on_cuda(nat::permute(q, {0, 2, 1, 3})), {0, 2, 1, 3});
    const Tensor gkt = nat::permute(on_cuda(nat::permute(kt, {0, 3, 1, 2})), {0, 2, 3, 1});
    CHECK_FALSE(gq.is_contiguous());
    check_close(nat::matmul(gq, gkt), nat::matmul(q, kt));
  }
  // Mixed devices are an error naming both.
  CHECK_THROWS(
      nat::mm(on_cuda(random_cpu({2, 2}, ls::kFloat32)), random_cpu({2, 2}, ls::kFloat32)));
}

TEST_CASE("CUDA linear forward and backward match the CPU with and without bias") {
  for (ls::ScalarType dtype : kFloats) {
    for (bool with_bias : {true, false}) {
      CAPTURE(dtype);
      CAPTURE(with_bias);
      const Tensor x = random_cpu({4, 3, 8}, dtype), w = random_cpu({5, 8}, dtype);
      const Tensor b = with_bias ? random_cpu({5}, dtype) : Tensor();
      check_close(nat::linear_forward(on_cuda(x), on_cuda(w), with_bias ? on_cuda(b) : Tensor()),
                  nat::linear_forward(x, w, b));
      const Tensor g = random_cpu({4, 3, 5}, dtype);
      auto [dx, dw, db] = nat::linear_backward(g, x, w, true, true, true);
      auto [gdx, gdw, gdb] =
          nat::linear_backward(on_cuda(g), on_cuda(x), on_cuda(w), true, true, true);
      check_close(gdx, dx);
      check_close(gdw, dw);
      check_close(gdb, db);
    }
  }
}

TEST_CASE(
    "CUDA conv2d forward and backward match the CPU for strides, padding, dilation and groups") {
  struct Case {
    IntList x, w, stride, padding, dilation;
    int64_t groups;
  };
  const std::vector<Case> cases = {
      {{2, 3, 9, 8}, {4, 3, 3, 3}, {1}, {1}, {1}, 1},
      {{2, 4, 9, 9}, {6, 2, 3, 3}, {2}, {1}, {1}, 2},
      {{1, 3, 11, 10}, {2, 3, 3, 2}, {2, 1}, {0, 1}, {2}, 1},
      {{2, 4, 7, 7}, {4, 1, 3, 3}, {1}, {1}, {1}, 4},     // depthwise
      {{3, 8, 6, 6}, {5, 8, 1, 1}, {1}, {0}, {1}, 1},     // pointwise
      {{2, 3, 16, 16}, {6, 3, 7, 7}, {2}, {3}, {1}, 1}};  // ResNet's stem
  for (ls::ScalarType dtype : kFloats) {
    for (const Case& c : cases) {
      CAPTURE(dtype);
      CAPTURE(ls::shape_str(c.w));
      const Tensor x = random_cpu(c.x, dtype), w = random_cpu(c.w, dtype);
      const Tensor b = random_cpu({c.w[0]}, dtype);
      const Tensor y = nat::conv2d_forward(x, w, b, c.stride, c.padding, c.dilation, c.groups);
      check_close(nat::conv2d_forward(on_cuda(x), on_cuda(w), on_cuda(b), c.stride, c.padding,
                                      c.dilation, c.groups),
                  y);
      const Tensor g = random_cpu(y.sizes(), dtype);
      auto [dx, dw, db] = nat::conv2d_backward(g, x, w, c.stride, c.padding, c.dilation, c.groups,
                                               true, true, true);
      auto [gdx, gdw, gdb] =
          nat::conv2d_backward(on_cuda(g), on_cuda(x), on_cuda(w), c.stride, c.padding, c.dilation,
                               c.groups, true, true, true);
      check_close(gdx, dx);
      check_close(gdw, dw);
      check_close(gdb, db);
      // Only what is asked for is computed.
      auto [only_dx, no_dw, no_db] =
          nat::conv2d_backward(on_cuda(g), on_cuda(x), on_cuda(w), c.stride, c.padding, c.dilation,
                               c.groups, true, false, false);
      check_close(only_dx, dx);
      CHECK_FALSE(no_dw.defined());
      CHECK_FALSE(no_db.defined());
    }
  }
}

TEST_CASE("CUDA conv2d passes a float64 gradcheck through the device op") {
  const Tensor x = random_cpu({1, 2, 5, 5}, ls::kFloat64),
               w = random_cpu({2, 1, 3, 3}, ls::kFloat64);
  const Tensor b = random_cpu({2}, ls::kFloat64);
  CHECK_GRADCHECK(
      [](const Inputs& v) {
        return ls::conv2d(v[0].to(cuda0()), v[1].to(cuda0()), v[2].to(cuda0()), {2}, {1}, {1}, 2)
            .to(ls::Device::cpu());
      },
      {x, w, b});
}

TEST_CASE("CUDA max_pool2d gives the CPU's values and indices, NaNs included, and its backward") {
  struct Case {
    IntList x, kernel, stride, padding;
  };
  const std::vector<Case> cases = {{{2, 3, 9, 9}, {3}, {2}, {1}},
                                   {{2, 2, 8, 6}, {2}, {}, {0}},
                                   {{1, 2, 7, 9}, {3, 2}, {1, 2}, {1, 0}}};
  for (ls::ScalarType dtype : kFloats) {
    for (const Case& c : cases) {
      CAPTURE(dtype);
      CAPTURE(ls::shape_str(c.x));
      Tensor x = random_cpu(c.x, dtype);
      nat::fill_(nat::select(nat::select(nat::select(x, 0, 0), 0, 1), 0, 2),
                 std::numeric_limits<double>::quiet_NaN());  // x[0, 1, 2, :] = NaN
      auto [y, idx] = nat::max_pool2d_forward(x, c.kernel, c.stride, c.padding);
      auto [gy, gidx] = nat::max_pool2d_forward(on_cuda(x), c.kernel, c.stride, c.padding);
      check_matches(gidx, idx, 0, 0);
      // NaN in the same places, equal values elsewhere.
      const Tensor y_host = to_cpu(gy);
      const Tensor nan_want = nat::compare(nat::CompareOp::Ne, y, y);
      CHECK(nat::sum(nan_want, {}, false).item<int64_t>() > 0);
      CHECK(nat::equal(nat::compare(nat::CompareOp::Ne, y_host, y_host), nan_want));
      CHECK(nat::equal(nat::where(nan_want, nat::zeros_like(y), y_host),
                       nat::where(nan_want, nat::zeros_like(y), y)));
      const Tensor g = random_cpu(y.sizes(), dtype);
      check_close(nat::max_pool2d_backward(on_cuda(g), gidx, c.x),
                  nat::max_pool2d_backward(g, idx, c.x));
    }
  }
  // Without NaNs the pooled values themselves match exactly.
  const Tensor x = random_cpu({2, 3, 9, 9}, ls::kFloat32);
  check_matches(std::get<0>(nat::max_pool2d_forward(on_cuda(x), {3}, {2}, {1})),
                std::get<0>(nat::max_pool2d_forward(x, {3}, {2}, {1})), 0, 0);
}

TEST_CASE("CUDA adaptive_avg_pool2d matches the CPU for global, overlapping and uneven windows") {
  const std::vector<std::pair<IntList, IntList>> cases = {
      {{2, 3, 7, 7}, {1}}, {{2, 3, 5, 7}, {3}}, {{1, 2, 6, 9}, {2, 4}}, {{1, 2, 3, 3}, {5, 4}}};
  for (ls::ScalarType dtype : kFloats) {
    for (const auto& [shape, out] : cases) {
      CAPTURE(dtype);
      CAPTURE(ls::shape_str(shape));
      const Tensor x = random_cpu(shape, dtype);
      const Tensor y = nat::adaptive_avg_pool2d_forward(x, out);
      check_close(nat::adaptive_avg_pool2d_forward(on_cuda(x), out), y);
      const Tensor g = random_cpu(y.sizes(), dtype);
      check_close(nat::adaptive_avg_pool2d_backward(on_cuda(g), shape),
                  nat::adaptive_avg_pool2d_backward(g, shape));
    }
  }
}

TEST_CASE(
    "CUDA batch_norm and batch_norm_relu match the CPU in training and eval, running stats "
    "included") {
  for (ls::ScalarType dtype : kFloats) {
    for (bool relu : {false, true}) {
      for (bool affine : {true, false}) {
        for (bool training : {true, false}) {
          CAPTURE(dtype);
          CAPTURE(relu);
          CAPTURE(affine);
          CAPTURE(training);
          const Tensor x =
              nat::binary_scalar(nat::BinaryOp::Add, random_cpu({4, 3, 5, 6}, dtype), 3.0);
          const Tensor w = affine ? random_cpu({3}, dtype) : Tensor();
          const Tensor b = affine ? random_cpu({3}, dtype) : Tensor();
          // Running stats as strided views (column 0 of a (3, 2) tensor), as the CPU allows.
          const Tensor stats =
              nat::binary_scalar(nat::BinaryOp::Add, random_cpu({3, 2}, dtype), 2.0);
          const Tensor rm = nat::select(nat::clone(stats), 1, 0),
                       rv = nat::select(nat::clone(stats), 1, 1);
          const Tensor gstats = on_cuda(stats);
          const Tensor grm = nat::select(nat::clone(gstats), 1, 0),
                       grv = nat::select(nat::clone(gstats), 1, 1);
          auto forward = relu ? nat::batch_norm_relu_forward : nat::batch_norm_forward;
          auto [y, mean, invstd] = forward(x, w, b, rm, rv, training, 0.1, 1e-5);
          auto [gy, gmean, ginvstd] =
              forward(on_cuda(x), affine ? on_cuda(w) : Tensor(), affine ? on_cuda(b) : Tensor(),
                      grm, grv, training, 0.1, 1e-5);
          check_close(gy, y);
          check_close(gmean, mean);
          check_close(ginvstd, invstd);
          check_close(nat::contiguous(grm), nat::contiguous(rm));
          check_close(nat::contiguous(grv), nat::contiguous(rv));
          const Tensor g = random_cpu(x.sizes(), dtype);
          auto [dx, dw, db] =
              relu ? nat::batch_norm_relu_backward(g, x, w, mean, invstd, y, training, true, true,
                                                   true)
                   : nat::batch_norm_backward(g, x, w, mean, invstd, training, true, true, true);
          const Tensor gw = affine ? on_cuda(w) : Tensor();
          auto [gdx, gdw, gdb] =
              relu ? nat::batch_norm_relu_backward(on_cuda(g), on_cuda(x), gw, gmean, ginvstd, gy,
                                                   training, true, true, true)
                   : nat::batch_norm_backward(on_cuda(g), on_cuda(x), gw, gmean, ginvstd, training,
                                              true, true, true);
          check_close(gdx, dx);
          check_close(gdw, dw);
          check_close(gdb, db);
        }
      }
    }
  }
}

TEST_CASE("CUDA batch_norm passes a float64 gradcheck in training mode") {
  const Tensor x = random_cpu({3, 2, 2, 2}, ls::kFloat64);
  const Tensor w = random_cpu({2}, ls::kFloat64), b = random_cpu({2}, ls::kFloat64);
  CHECK_GRADCHECK(
      [](const Inputs& v) {
        return ls::batch_norm(v[0].to(cuda0()), v[1].to(cuda0()), v[2].to(cuda0()), Tensor(),
                              Tensor(), true, 0.1, 1e-5)
            .to(ls::Device::cpu());
      },
      {x, w, b});
}

TEST_CASE("CUDA layer_norm forward and backward match the CPU, with and without affine") {
  for (ls::ScalarType dtype : kFloats) {
    for (bool affine : {true, false}) {
      CAPTURE(dtype);
      CAPTURE(affine);
      const Tensor x =
          nat::binary_scalar(nat::BinaryOp::Add, random_cpu({3, 4, 2, 40}, dtype), 5.0);
      const IntList shape{2, 40};
      const Tensor w = affine ? random_cpu(shape, dtype) : Tensor();
      const Tensor b = affine ? random_cpu(shape, dtype) : Tensor();
      auto [y, mean, rstd] = nat::layer_norm_forward(x, shape, w, b, 1e-5);
      auto [gy, gmean, grstd] = nat::layer_norm_forward(
          on_cuda(x), shape, affine ? on_cuda(w) : Tensor(), affine ? on_cuda(b) : Tensor(), 1e-5);
      check_close(gy, y);
      check_close(gmean, mean);
      check_close(grstd, rstd);
      const Tensor g = random_cpu(x.sizes(), dtype);
      auto [dx, dw, db] = nat::layer_norm_backward(g, x, shape, mean, rstd, w, true, true, true);
      auto [gdx, gdw, gdb] =
          nat::layer_norm_backward(on_cuda(g), on_cuda(x), shape, gmean, grstd,
                                   affine ? on_cuda(w) : Tensor(), true, true, true);
      check_close(gdx, dx);
      CHECK(gdw.defined() == affine);
      if (affine) check_close(gdw, dw);
      check_close(gdb, db);
    }
  }
  const Tensor x = random_cpu({3, 4}, ls::kFloat64), w = random_cpu({4}, ls::kFloat64);
  CHECK_GRADCHECK(
      [](const Inputs& v) {
        return ls::layer_norm(v[0].to(cuda0()), {4}, v[1].to(cuda0()), Tensor(), 1e-5)
            .to(ls::Device::cpu());
      },
      {x, w});
}

TEST_CASE("CUDA embedding matches the CPU with repeated indices, padding_idx and int32 indices") {
  for (ls::ScalarType dtype : kFloats) {
    for (ls::ScalarType index_type : {ls::kInt64, ls::kInt32}) {
      CAPTURE(dtype);
      CAPTURE(index_type);
      const Tensor w = random_cpu({10, 6}, dtype);
      const Tensor idx = nat::to_dtype(ls::tensor(std::vector<int64_t>{3, 0, 3, 9, 2, 0}, {2, 3}),
                                       index_type);  // 0 = padding
      check_close(nat::embedding_forward(on_cuda(w), on_cuda(idx), 0),
                  nat::embedding_forward(w, idx, 0));
      check_close(nat::embedding_forward(on_cuda(w), idx, -1), nat::embedding_forward(w, idx, -1));
      const Tensor g = random_cpu({2, 3, 6}, dtype);
      check_close(nat::embedding_backward(on_cuda(g), on_cuda(idx), 10, 0),
                  nat::embedding_backward(g, idx, 10, 0));
      check_close(nat::embedding_backward(on_cuda(g), on_cuda(idx), 10, -1),
                  nat::embedding_backward(g, idx, 10, -1));
    }
  }
  // An out-of-range token id on the device is an error naming it, not a wild read.
  const Tensor w = on_cuda(random_cpu({10, 6}, ls::kFloat32));
  CHECK(ls::testing::contains(
      ls::testing::error_of([&] {
        nat::embedding_forward(w, on_cuda(ls::tensor(std::vector<int64_t>{1, 10}, {2})), -1);
      }),
      "index 10"));
}

TEST_CASE("CUDA dropout draws the same mask as the CPU for the same seed") {
  for (ls::ScalarType dtype : kFloats) {
    for (double p : {0.0, 0.3, 1.0}) {
      CAPTURE(dtype);
      CAPTURE(p);
      const Tensor x = random_cpu({7, 33}, dtype);
      ls::manual_seed(1234);
      auto [y, mask] = nat::dropout_forward(x, p);
      ls::manual_seed(1234);
      auto [gy, gmask] = nat::dropout_forward(on_cuda(x), p);
      check_matches(gmask, mask, 0, 0);
      check_close(gy, y);
      const Tensor g = random_cpu(x.sizes(), dtype);
      check_close(nat::dropout_backward(on_cuda(g), gmask, p), nat::dropout_backward(g, mask, p));
    }
  }
}

TEST_CASE("CUDA cross_entropy and mse_loss match the CPU, ignore_index included") {
  for (ls::ScalarType dtype : kFloats) {
    CAPTURE(dtype);
    const Tensor logits = random_cpu({6, 5}, dtype);
    const Tensor target = ls::tensor(std::vector<int64_t>{4, -100, 0, 2, -100, 1}, {6});
    auto [loss, lp] = nat::cross_entropy_forward(logits, target, -100);
    auto [gloss, glp] = nat::cross_entropy_forward(on_cuda(logits), on_cuda(target), -100);
    check_close(gloss, loss);
    check_close(glp, lp);
    const Tensor grad = ls::scalar_tensor(0.7, dtype);  // 0-d
    check_close(nat::cross_entropy_backward(on_cuda(grad), glp, on_cuda(target), -100),
                nat::cross_entropy_backward(grad, lp, target, -100));
    // A CPU target works too; every row ignored gives NaN, as the CPU.
    const Tensor all_ignored =
        ls::tensor(std::vector<int64_t>{-100, -100, -100, -100, -100, -100}, {6});
    CHECK(std::isnan(
        to_cpu(std::get<0>(nat::cross_entropy_forward(on_cuda(logits), all_ignored, -100)))
            .item<double>()));
    const Tensor a = random_cpu({4, 9}, dtype), b = random_cpu({4, 9}, dtype);
    check_close(nat::mse_loss_forward(on_cuda(a), on_cuda(b)), nat::mse_loss_forward(a, b));
    check_close(nat::mse_loss_backward(on_cuda(grad), on_cuda(a), on_cuda(b)),
                nat::mse_loss_backward(grad, a, b));
  }
  CHECK(ls::testing::contains(ls::testing::error_of([] {
                                nat::cross_entropy_forward(
                                    on_cuda(random_cpu({2, 3}, ls::kFloat32)),
                                    on_cuda(ls::tensor(std::vector<int64_t>{0, 3}, {2})), -100);
                              }),
                              "out of bounds"));
}

TEST_CASE("CUDA add_relu matches the CPU on strided operands") {
  for (ls::ScalarType dtype : kFloats) {
    const Tensor a = random_cpu({5, 4}, dtype), b = random_cpu({4, 5}, dtype);
    check_close(nat::add_relu(on_cuda(a), nat::transpose(on_cuda(b), 0, 1)),
                nat::add_relu(a, nat::transpose(b, 0, 1)));
  }
}
