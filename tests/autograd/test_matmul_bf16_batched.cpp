// tests/autograd/test_matmul_bf16_batched.cpp — matmul on bfloat16 attention-shaped
// operands, which run as one oneDNN call per op (Note [bf16 batched matmul as one
// call] in core/native/gemm_bf16.h): q k^T and p v on (B, H, T, D) heads viewed out
// of one (B, T, 3 H D) projection (gapped, so matmul copies them into a dense batch
// first), the heads of a dense (B, T, H D) tensor (read in place), a key broadcast
// over the batch (its gradient summed over the batch: native::sum_to in float32),
// and all their gradients, on the OneDNN backend against the Reference backend's
// per-product loops. Both sum in float32 and round once to bf16; the gradients
// pass through one more bf16 product, so the tolerance is two roundings, 1.6e-2
// relative.
// Read before: core/native/linalg.cpp, autograd/functions/linalg.cpp.
#include <doctest/doctest.h>

#include <vector>

#include "core/factory.h"
#include "core/native/native.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "tests/support/backend_scope.h"
#include "tests/support/compare.h"

namespace ls = lockstep;
namespace nv = lockstep::native;
using ls::testing::GemmBackendScope;
using ls::testing::relative_error;

// scores = q k^T and context = p v on (B, H, T, D) heads viewed out of one (B, T, 3 H D)
// projection, as nn/attention.cpp does, and the gradients of both, on the OneDNN backend
// against the Reference backend (the per-product loops).
TEST_CASE("matmul bf16: attention-shaped views and their gradients equal the reference") {
  ls::manual_seed(12);
  const int64_t B = 2, T = 12, H = 3, D = 8, E = H * D;
  const ls::Tensor qkv = nv::to_dtype(ls::randn({B, T, 3 * E}), ls::kBFloat16);
  const ls::Tensor p0 = nv::to_dtype(ls::randn({B, H, T, T}), ls::kBFloat16);
  const ls::Tensor o0 = nv::to_dtype(ls::randn({B, T, E}), ls::kBFloat16);
  auto run = [&](nv::GemmBackend backend) {
    GemmBackendScope scope(backend);
    auto head = [&](int64_t i) {  // (B, H, T, D), a view with gaps between heads' rows
      return qkv.narrow(2, i * E, E).reshape({B, T, H, D}).transpose(1, 2).detach().requires_grad_(true);
    };
    ls::Tensor q = head(0), k = head(1), v = head(2);
    ls::Tensor p = p0.detach().requires_grad_(true);
    ls::Tensor scores = q.matmul(k.transpose(2, 3));  // (B, H, T, T)
    ls::Tensor context = p.matmul(v);                 // (B, H, T, D)
    ls::Tensor k_shared = q.matmul(k.select(0, 0).transpose(1, 2));  // broadcast over B
    // the heads of a dense (B, T, E) tensor (read in place), times v transposed
    ls::Tensor o = o0.detach().requires_grad_(true);
    ls::Tensor heads = o.reshape({B, T, H, D}).transpose(1, 2).matmul(v.transpose(2, 3));
    (scores.to(ls::kFloat32).sum() + (context.to(ls::kFloat32) * context.to(ls::kFloat32)).sum() +
     k_shared.to(ls::kFloat32).sum() + heads.to(ls::kFloat32).sum())
        .backward();
    return std::vector<ls::Tensor>{scores, context, k_shared, heads, q.grad(), k.grad(),
                                   v.grad(), p.grad(), o.grad()};
  };
  const std::vector<ls::Tensor> fast = run(nv::GemmBackend::OneDNN);
  const std::vector<ls::Tensor> ref = run(nv::GemmBackend::Reference);
  for (size_t i = 0; i < fast.size(); ++i) {
    CAPTURE(i);
    REQUIRE(fast[i].defined());
    CHECK(fast[i].sizes() == ref[i].sizes());
    // bf16 results: each within a rounding or two of the other (both sum in float32).
    CHECK(relative_error(fast[i].to(ls::kFloat32), ref[i].to(ls::kFloat32)) < 1.6e-2);
  }
}
