// tests/core/test_gemm_bf16_packed.cpp — Note [bf16 weights packed once per step]
// (core/native/gemm_bf16.cpp): a GEMM whose B is named as a weight gives the
// result of the plain path (the same products summed by the same kernel family:
// float32 within 1e-5 relative of the reference loops, bf16 within one rounding,
// 8e-3), packs the weight once per version, packs again when the version, the
// pointer or the owner changes, and linear under autocast uses it.
// Read before: core/native/gemm_bf16.h.
#include <doctest/doctest.h>

#include <memory>

#include "core/autocast.h"
#include "core/grad_mode.h"
#include "core/factory.h"
#include "core/native/fast/onednn_engine.h"
#include "core/native/gemm_bf16.h"
#include "core/native/native.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "tests/support/compare.h"

namespace ls = lockstep;
namespace nv = lockstep::native;
using ls::BFloat16;
using ls::testing::relative_error;

namespace {

ls::Tensor random_bf16(const ls::IntList& sizes) {
  return nv::to_dtype(ls::randn(sizes), ls::kBFloat16);
}

// C (m, n) = A (m, k) op(B) with B named as `w`, and the reference loops' result.
void check_against_reference(bool trans_b, const ls::Tensor& a, const ls::Tensor& b, int64_t m,
                             int64_t n, int64_t k, const nv::Bf16Weight& w) {
  const int64_t ldb = trans_b ? k : n;
  ls::Tensor ref = ls::zeros({m, n});
  nv::gemm_bf16_reference<float>(false, trans_b, m, n, k, a.data_ptr<BFloat16>(), k,
                                 b.data_ptr<BFloat16>(), ldb, 0.0f, ref.data_ptr<float>(), n);
  ls::Tensor c = ls::zeros({m, n});
  nv::gemm_bf16<float>(false, trans_b, m, n, k, a.data_ptr<BFloat16>(), k, b.data_ptr<BFloat16>(),
                       ldb, 0.0f, c.data_ptr<float>(), n, nullptr, &w);
  CHECK(relative_error(c, ref) < 1e-5);
  ls::Tensor c16 = nv::empty({m, n}, ls::kBFloat16);
  nv::gemm_bf16<BFloat16>(false, trans_b, m, n, k, a.data_ptr<BFloat16>(), k,
                          b.data_ptr<BFloat16>(), ldb, 0.0f, c16.data_ptr<BFloat16>(), n,
                          nullptr, &w);
  CHECK(relative_error(nv::to_dtype(c16, ls::kFloat32), ref) < 8e-3);
}

}  // namespace

TEST_CASE("gemm_bf16 packed weight: equals the reference, packed once per version") {
  ls::manual_seed(3);
  const int64_t m = 70, n = 48, k = 96;
  for (bool trans_b : {false, true}) {
    CAPTURE(trans_b);
    ls::Tensor a = random_bf16({m, k});
    ls::Tensor b = random_bf16(trans_b ? ls::IntList{n, k} : ls::IntList{k, n});
    auto owner = std::make_shared<int>(0);
    nv::Bf16Weight w{owner, 1};
    // Packing is oneDNN's: a CPU without its bf16 kernels (Note [bf16 without oneDNN
    // kernels]) multiplies in float32 and packs nothing, with the same values.
    const int64_t per_pack = nv::onednn_detail::has_bf16() ? 1 : 0;
    const int64_t packs0 = nv::gemm_bf16_weights_packed();
    check_against_reference(trans_b, a, b, m, n, k, w);
    const int64_t packs1 = nv::gemm_bf16_weights_packed();
    CHECK(packs1 - packs0 == per_pack);  // the float and the bf16 output share the packed copy
    // New values in B under a new version: packed again, and the result follows them.
    b = random_bf16(trans_b ? ls::IntList{n, k} : ls::IntList{k, n});
    w.version = 2;
    check_against_reference(trans_b, a, b, m, n, k, w);
    CHECK(nv::gemm_bf16_weights_packed() - packs1 == per_pack);
    // Another owner: its own copy.
    nv::Bf16Weight other{std::make_shared<int>(0), 2};
    check_against_reference(trans_b, a, b, m, n, k, other);
    CHECK(nv::gemm_bf16_weights_packed() - packs1 == 2 * per_pack);
  }
}

TEST_CASE("gemm_bf16 packed weight: linear under autocast follows the parameter's updates") {
  ls::manual_seed(4);
  ls::Tensor x = ls::randn({16, 32});
  ls::Tensor w = ls::randn({24, 32}, ls::requires_grad());
  ls::Tensor b = ls::randn({24}, ls::requires_grad());
  for (int step = 0; step < 2; ++step) {
    ls::Tensor y;
    {
      ls::AutocastGuard amp(ls::kBFloat16);
      y = ls::linear(x, w, b);
    }
    // The float32 product of the same bf16-rounded operands, rounded once.
    ls::Tensor ref = nv::to_dtype(nv::to_dtype(x, ls::kBFloat16), ls::kFloat32)
                         .matmul(nv::to_dtype(nv::to_dtype(w, ls::kBFloat16), ls::kFloat32)
                                     .transpose(0, 1)) +
                     nv::to_dtype(nv::to_dtype(b, ls::kBFloat16), ls::kFloat32);
    CHECK(relative_error(nv::to_dtype(y.detach(), ls::kFloat32), ref) < 8e-3);
    // The input gradient reads the packed W as well.
    ls::Tensor xg = x.detach().requires_grad_(true);
    {
      ls::AutocastGuard amp(ls::kBFloat16);
      ls::linear(xg, w, b).to(ls::kFloat32).sum().backward();
    }
    ls::Tensor dx_ref = ls::ones({16, 24}).matmul(
        nv::to_dtype(nv::to_dtype(w.detach(), ls::kBFloat16), ls::kFloat32));
    CHECK(relative_error(nv::to_dtype(xg.grad(), ls::kFloat32), dx_ref) < 8e-3);
    // An in-place update of the parameter (as the optimizer's) bumps its version.
    ls::NoGradGuard no_grad;
    w.mul_(-0.5);
  }
}
