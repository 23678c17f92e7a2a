// tests/core/test_reference_ops.cpp — matmul, batch norm (and its fused ReLU),
// layer norm, max and adaptive-average pooling, softmax and cross-entropy, each
// on every path the dtype, layout and thread count select, against the plain
// loops of core/native/reference/ (Note [Plain reference kernels]).
//
// Tolerances, as max |fast - reference| / max |reference| (the reference reads
// the very values the fast path read, in double):
//   float64  1e-12 (summation order only)
//   float32  1e-5  (sums of at most a few hundred terms; normalisation 2e-5)
//   bf16     8e-3  for results rounded to bf16 (2^-8 relative, one rounding),
//            1e-4  for the float32 results a bf16 kernel returns (statistics,
//                  parameter gradients)
//   max pooling: exact values and indices (a maximum is one of the inputs).
// Read before: tests/core/test_reference_conv.cpp.
#include <doctest/doctest.h>

#include <tuple>
#include <vector>

#include "core/factory.h"
#include "core/native/fused_relu.h"
#include "core/native/gemm.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/native/nn_kernels_transformer.h"
#include "core/native/reference/reference.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/shape.h"
#include "tests/support/compare.h"

namespace ls = lockstep;
namespace nv = lockstep::native;
namespace ref = lockstep::native::reference;
using ls::IntList;
using ls::Tensor;
using ls::testing::relative_error;

namespace {

// The float dtypes a kernel family serves, with the tolerance of its rounded results.
struct Dtype {
  ls::ScalarType type;
  double tol;
};
const Dtype kFloat64{ls::kFloat64, 1e-12}, kFloat32{ls::kFloat32, 2e-5}, kBf16{ls::kBFloat16, 8e-3};

Tensor random(const IntList& sizes, ls::ScalarType dtype) {
  return nv::to_dtype(ls::randn(sizes), dtype);
}

// Restores the thread count and GEMM backend.
struct ModeGuard {
  int threads = ls::get_num_threads();
  nv::GemmBackend gemm = nv::gemm_backend();
  ~ModeGuard() {
    ls::set_num_threads(threads);
    nv::set_gemm_backend(gemm);
  }
};

}  // namespace

TEST_CASE("reference mm: every GEMM backend, float64, float32 and bf16") {
  ModeGuard guard;
  ls::manual_seed(21);
  for (auto [n, k, m] : {std::tuple{7, 13, 5}, std::tuple{64, 96, 48}, std::tuple{1, 300, 3}}) {
    for (nv::GemmBackend backend :
         {nv::GemmBackend::Reference, nv::GemmBackend::Eigen, nv::GemmBackend::OneDNN}) {
      CAPTURE(nv::gemm_backend_name(backend));
      nv::set_gemm_backend(backend);
      for (Dtype d : {kFloat64, kFloat32, kBf16}) {
        CAPTURE(d.type);
        const Tensor a = random({n, k}, d.type), b = random({k, m}, d.type);
        CHECK(relative_error(nv::mm(a, b), ref::mm(a, b)) < d.tol);
        CHECK(relative_error(nv::matmul(a, b), ref::mm(a, b)) < d.tol);
      }
    }
  }
}

TEST_CASE(
    "reference batch norm: float64, float32, bf16 NCHW and channels-last, fused ReLU, threads") {
  ModeGuard guard;
  ls::manual_seed(22);
  const double eps = 1e-5;
  for (const IntList& sizes : {IntList{4, 3, 5, 6}, IntList{2, 8, 7, 7}, IntList{16, 5}}) {
    const int64_t c = sizes[1];
    const Tensor w = ls::randn({c}), b = ls::randn({c});
    for (int threads : {1, 2}) {
      ls::set_num_threads(threads);
      for (Dtype d : {kFloat64, kFloat32, kBf16}) {
        for (bool channels_last : {false, true}) {
          if (channels_last && (d.type != ls::kBFloat16 || sizes.size() != 4)) continue;
          CAPTURE(ls::shape_str(sizes));
          CAPTURE(d.type);
          CAPTURE(channels_last);
          Tensor x = nv::to_dtype(ls::randn(sizes) * 2.0 + 3.0, d.type), gy = random(sizes, d.type);
          if (channels_last) x = nv::channels_last(x), gy = nv::channels_last(gy);
          const Tensor wd = nv::to_dtype(w, d.type == ls::kBFloat16 ? ls::kFloat32 : d.type);
          const Tensor bd = nv::to_dtype(b, wd.dtype());
          auto [ry, rmean, rinvstd] = ref::batch_norm_forward(x, wd, bd, eps);
          auto [y, mean, invstd] =
              nv::batch_norm_forward(x, wd, bd, Tensor(), Tensor(), true, 0.1, eps);
          const double stat_tol = d.type == ls::kBFloat16 ? 1e-4 : d.tol;
          CHECK(relative_error(y, ry) < d.tol);
          CHECK(relative_error(mean, rmean) < stat_tol);
          CHECK(relative_error(invstd, rinvstd) < stat_tol);
          auto [relu_y, m2, i2] =
              nv::batch_norm_relu_forward(x, wd, bd, Tensor(), Tensor(), true, 0.1, eps);
          CHECK(relative_error(relu_y, ry.relu()) < d.tol);
          auto [rgx, rgw, rgb] = ref::batch_norm_backward(gy, x, wd, eps);
          auto [gx, gw, gb] =
              nv::batch_norm_backward(gy, x, wd, mean, invstd, true, true, true, true);
          CHECK(relative_error(gx, rgx) < d.tol);
          CHECK(relative_error(gw, rgw) < stat_tol);
          CHECK(relative_error(gb, rgb) < stat_tol);
        }
      }
    }
  }
}

TEST_CASE("reference layer norm: float64 and float32, with and without affine parameters") {
  ls::manual_seed(23);
  for (Dtype d : {kFloat64, kFloat32}) {
    for (bool affine : {true, false}) {
      CAPTURE(d.type);
      CAPTURE(affine);
      const Tensor x = nv::to_dtype(ls::randn({3, 4, 24}) + 5.0, d.type),
                   gy = random({3, 4, 24}, d.type);
      const Tensor w = affine ? random({24}, d.type) : Tensor(),
                   b = affine ? random({24}, d.type) : Tensor();
      auto [ry, rmean, rrstd] = ref::layer_norm_forward(x, 24, w, b, 1e-5);
      auto [y, mean, rstd] = nv::layer_norm_forward(x, {24}, w, b, 1e-5);
      CHECK(relative_error(y, ry) < d.tol);
      CHECK(relative_error(mean, rmean) < d.tol);
      CHECK(relative_error(rstd, rrstd) < d.tol);
      auto [rgx, rgw, rgb] = ref::layer_norm_backward(gy, x, 24, w, 1e-5);
      auto [gx, gw, gb] = nv::layer_norm_backward(gy, x, {24}, mean, rstd, w, true, affine, affine);
      CHECK(relative_error(gx, rgx) < d.tol);
      if (affine) {
        CHECK(relative_error(gw, rgw) < d.tol);
        CHECK(relative_error(gb, rgb) < d.tol);
      }
    }
  }
}

TEST_CASE(
    "reference pooling: max (separable, 2x2, per-window, bf16 channels-last) and adaptive "
    "average") {
  ModeGuard guard;
  ls::manual_seed(24);
  struct Case {
    IntList sizes;
    int64_t k, s, p;
  };
  for (const Case& c : {Case{{2, 3, 12, 12}, 3, 2, 1}, Case{{2, 4, 28, 28}, 2, 2, 0},
                        Case{{1, 2, 7, 9}, 3, 1, 1}, Case{{2, 16, 8, 8}, 2, 2, 0}}) {
    for (int threads : {1, 2}) {
      ls::set_num_threads(threads);
      for (Dtype d : {kFloat64, kFloat32, kBf16}) {
        for (bool channels_last : {false, true}) {
          if (channels_last && d.type != ls::kBFloat16) continue;
          CAPTURE(ls::shape_str(c.sizes));
          CAPTURE(c.k);
          CAPTURE(d.type);
          CAPTURE(channels_last);
          Tensor x = random(c.sizes, d.type);
          if (channels_last) x = nv::channels_last(x);
          auto [ry, ridx] = ref::max_pool2d_forward(x, c.k, c.k, c.s, c.s, c.p, c.p);
          auto [y, idx] = nv::max_pool2d_forward(x, {c.k}, {c.s}, {c.p});
          CHECK(relative_error(y, ry) == 0.0);
          CHECK(idx.to_vector<int64_t>() == ridx.to_vector<int64_t>());
          Tensor gy = random(y.sizes(), d.type);
          if (channels_last) gy = nv::channels_last(gy);  // as autograd hands it over
          const Tensor gx =
              nv::max_pool2d_backward(gy, idx, x.sizes(), nv::max_pool2d_tile({c.k}, {c.s}, {c.p}));
          CHECK(relative_error(gx, ref::max_pool2d_backward(gy, ridx, c.sizes[2], c.sizes[3])) <
                d.tol);
          if (channels_last) continue;
          for (auto [oh, ow] : {std::pair{1, 1}, std::pair{3, 5}}) {
            CHECK(relative_error(nv::adaptive_avg_pool2d_forward(x, {oh, ow}),
                                 ref::adaptive_avg_pool2d_forward(x, oh, ow)) < d.tol);
            const Tensor g = random({c.sizes[0], c.sizes[1], oh, ow}, d.type);
            CHECK(relative_error(nv::adaptive_avg_pool2d_backward(g, x.sizes()),
                                 ref::adaptive_avg_pool2d_backward(g, c.sizes[2], c.sizes[3])) <
                  d.tol);
          }
        }
      }
    }
  }
}

TEST_CASE("reference softmax and cross-entropy: every dim, float64 and float32, ignored rows") {
  ls::manual_seed(25);
  for (Dtype d : {kFloat64, kFloat32}) {
    CAPTURE(d.type);
    const Tensor x = random({3, 5, 7}, d.type) * 4.0;
    for (int64_t dim = 0; dim < 3; ++dim) {
      CAPTURE(dim);
      const Tensor y = nv::softmax(x, dim), gy = random(x.sizes(), d.type);
      CHECK(relative_error(y, ref::softmax(x, dim, false)) < d.tol);
      CHECK(relative_error(nv::log_softmax(x, dim), ref::softmax(x, dim, true)) < d.tol);
      CHECK(relative_error(nv::softmax_backward(gy, y, dim), ref::softmax_backward(gy, y, dim)) <
            d.tol);
    }
    const Tensor logits = random({6, 10}, d.type) * 3.0;
    const Tensor target = ls::tensor(std::vector<int64_t>{3, -100, 0, 9, 9, -100}, {6});
    auto [loss, log_probs] = nv::cross_entropy_forward(logits, target, -100);
    CHECK(relative_error(loss, ref::cross_entropy_forward(logits, target, -100)) < d.tol);
    const Tensor grad = ls::scalar_tensor(0.7, ls::TensorOptions().dtype(d.type));
    CHECK(relative_error(nv::cross_entropy_backward(grad, log_probs, target, -100),
                         ref::cross_entropy_backward(0.7, logits, target, -100)) < d.tol);
  }
}
