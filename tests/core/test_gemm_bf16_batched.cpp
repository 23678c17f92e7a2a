// tests/core/test_gemm_bf16_batched.cpp — Note [bf16 batched matmul as one call]
// (core/native/gemm_bf16.h): a strided batch of bf16 products run as one oneDNN
// call equals the reference loops (float32 C within 1e-5 relative: the same
// products summed in float32 in another order; bfloat16 C within one rounding,
// 8e-3), for transposed, gapped, broadcast and multi-dim batches, and a repeated
// shape builds no primitive. matmul on such operands: tests/autograd/test_matmul_bf16_batched.cpp.
// Read before: core/native/gemm_bf16.h. Read next: tests/autograd/test_matmul_bf16_batched.cpp.
#include <doctest/doctest.h>

#include "core/factory.h"
#include "core/native/gemm.h"
#include "core/native/gemm_bf16.h"
#include "core/native/native.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "tests/support/backend_scope.h"
#include "tests/support/compare.h"

namespace ls = lockstep;
namespace nv = lockstep::native;

namespace {

using ls::BFloat16;
using ls::testing::GemmBackendScope;
using ls::testing::relative_error;

// One case: C (sizes..., m, n) from buffers a, b read through the strides.
struct Case {
  const char* name;
  nv::Bf16Batch batch;
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb;
  int64_t a_elems, b_elems;  // buffer sizes
};

int64_t batch_count(const nv::Bf16Batch& b) {
  int64_t count = 1;
  for (int64_t s : b.sizes) count *= s;
  return count;
}

template <class Out>
void check_case(const Case& c) {
  CAPTURE(c.name);
  const ls::Tensor a = nv::to_dtype(ls::randn({c.a_elems}), ls::kBFloat16);
  const ls::Tensor b = nv::to_dtype(ls::randn({c.b_elems}), ls::kBFloat16);
  const ls::ScalarType out_type = std::is_same_v<Out, float> ? ls::kFloat32 : ls::kBFloat16;
  const int64_t c_elems = batch_count(c.batch) * c.m * c.n;
  ls::Tensor ref = ls::zeros({c_elems});
  nv::gemm_bf16_strided_batched_reference<float>(c.batch, c.trans_a, c.trans_b, c.m, c.n, c.k,
                                                 a.data_ptr<BFloat16>(), c.lda,
                                                 b.data_ptr<BFloat16>(), c.ldb,
                                                 ref.data_ptr<float>());
  ls::Tensor out = nv::to_dtype(ls::zeros({c_elems}), out_type);
  GemmBackendScope onednn(nv::GemmBackend::OneDNN);
  nv::gemm_bf16_strided_batched<Out>(c.batch, c.trans_a, c.trans_b, c.m, c.n, c.k,
                                     a.data_ptr<BFloat16>(), c.lda, b.data_ptr<BFloat16>(),
                                     c.ldb, out.data_ptr<Out>());
  CHECK(relative_error(nv::to_dtype(out, ls::kFloat32), ref) <
        (std::is_same_v<Out, float> ? 1e-5 : 8e-3));
  // The same shape again: the cached primitive, none built.
  const int64_t built = nv::gemm_bf16_batched_primitives_built();
  nv::gemm_bf16_strided_batched<Out>(c.batch, c.trans_a, c.trans_b, c.m, c.n, c.k,
                                     a.data_ptr<BFloat16>(), c.lda, b.data_ptr<BFloat16>(),
                                     c.ldb, out.data_ptr<Out>());
  CHECK(nv::gemm_bf16_batched_primitives_built() == built);
}

}  // namespace

TEST_CASE("gemm_bf16_strided_batched: one call equals the reference loops") {
  ls::manual_seed(11);
  const int64_t m = 24, n = 40, k = 16;
  const std::vector<Case> cases = {
      // (6) contiguous A (m, k) and B (k, n)
      {"dense", {{6}, {m * k}, {k * n}}, false, false, m, n, k, k, n, 6 * m * k, 6 * k * n},
      // (2, 3), A and B both read transposed, contiguous over the batch
      {"transposed", {{2, 3}, {3 * m * k, m * k}, {3 * k * n, k * n}}, true, true, m, n, k, m, k,
       6 * m * k, 6 * k * n},
      // (2, 3) heads of a fused projection: rows of A 3x wider than k, B transposed likewise
      {"gapped heads", {{2, 3}, {m * 3 * k * 3, k}, {n * 3 * k * 3, k}}, false, true, m, n, k,
       3 * 3 * k, 3 * 3 * k, 2 * m * 9 * k, 2 * n * 9 * k},
      // (4, 5): B broadcast along the first dim, A along the second
      {"broadcast", {{4, 5}, {m * k, 0}, {0, k * n}}, false, false, m, n, k, k, n, 4 * m * k,
       5 * k * n},
      // (3, 1, 2) with a size-1 dim and padded leading dimensions
      {"padded", {{3, 1, 2}, {2 * m * (k + 5), 7, m * (k + 5)}, {2 * k * (n + 3), 9, k * (n + 3)}},
       false, false, m, n, k, k + 5, n + 3, 6 * m * (k + 5), 6 * k * (n + 3)},
  };
  for (const Case& c : cases) {
    check_case<float>(c);
    check_case<BFloat16>(c);
  }
}

TEST_CASE("gemm_bf16_strided_batched: bad arguments name what is wrong") {
  const ls::Tensor a = nv::to_dtype(ls::zeros({64}), ls::kBFloat16);
  ls::Tensor c = ls::zeros({64});
  const nv::Bf16Batch mismatched{{2, 2}, {16}, {16, 4}};
  CHECK_THROWS_WITH_AS(nv::gemm_bf16_strided_batched<float>(
                           mismatched, false, false, 4, 4, 4, a.data_ptr<BFloat16>(), 4,
                           a.data_ptr<BFloat16>(), 4, c.data_ptr<float>()),
                       doctest::Contains("2 batch dims but 1 strides of A"), ls::Error);
  const nv::Bf16Batch ok{{2}, {16}, {16}};
  CHECK_THROWS_WITH_AS(nv::gemm_bf16_strided_batched<float>(
                           ok, false, false, 4, 4, 4, a.data_ptr<BFloat16>(), 3,
                           a.data_ptr<BFloat16>(), 4, c.data_ptr<float>()),
                       doctest::Contains("narrower than the matrices"), ls::Error);
}
