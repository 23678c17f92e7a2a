// tests/distributed/test_sync_batch_norm_double_backward.cpp — Note [SyncBatchNorm
// double backward]: on 1 and 2 ranks, a gradient penalty through sync_batch_norm
// (the input gradient taken with create_graph, then differentiated into the
// input and the weight) equals batch_norm's on the concatenated batch, whose
// double backward is gradgradchecked in tests/autograd/test_double_backward_nn.cpp.
// float64, tolerance 1e-9 (the AllReduce's summation order).
// Read before: distributed/ddp/sync_batch_norm_recorded.h, tests/support/multiprocess.h.
#include <doctest/doctest.h>

#include <chrono>
#include <optional>

#include "autograd/grad.h"
#include "core/factory.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "distributed/distributed.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using ls::Tensor;

namespace {

constexpr double kTolerance = 1e-9;

double max_diff(const Tensor& a, const Tensor& b) { return (a - b).abs().max().item<double>(); }

// Each of `world` ranks holds `per_rank` examples of (3, 2, 2).
void check_penalty_against_local(int world, int64_t per_rank) {
  ls::testing::run_ranks(
      world,
      [=](int rank) {
        auto pg = dist::init_process_group("gloo");
        const ls::TensorOptions f64 = ls::TensorOptions().dtype(ls::kFloat64);
        ls::manual_seed(9);
        const int64_t total = world * per_rank, offset = rank * per_rank;
        const Tensor x_all = ls::randn({total, 3, 2, 2}, f64) * 2.0 + 1.0;
        const Tensor g_all = ls::randn({total, 3, 2, 2}, f64), u_all = ls::randn({total, 3, 2, 2}, f64);
        const Tensor w0 = ls::randn({3}, f64), b0 = ls::randn({3}, f64);

        // The reference: one process, the whole batch. P = sum(dx^2 u).
        Tensor xr = x_all.clone().requires_grad_(true), wr = w0.clone().requires_grad_(true);
        Tensor br = b0.clone().requires_grad_(true);
        const Tensor yr = ls::batch_norm(xr, wr, br, Tensor(), Tensor(), true, 0.1, 1e-5);
        const Tensor dxr = ls::autograd::grad({yr}, {xr}, {g_all}, std::nullopt, true)[0];
        const auto ref = ls::autograd::grad({(dxr * dxr * u_all).sum()}, {xr, wr});

        Tensor x = x_all.narrow(0, offset, per_rank).clone().requires_grad_(true);
        Tensor w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
        Tensor rm = ls::zeros({3}, f64), rv = ls::ones({3}, f64);
        const Tensor y = dist::sync_batch_norm(x, w, b, rm, rv, 0.1, 1e-5, pg);
        const Tensor dx = ls::autograd::grad({y}, {x}, {g_all.narrow(0, offset, per_rank)},
                                             std::nullopt, /*create_graph=*/true)[0];
        INFO("rank ", rank, " of ", world);
        CHECK(max_diff(dx.detach(), dxr.detach().narrow(0, offset, per_rank)) < kTolerance);
        const Tensor p = (dx * dx * u_all.narrow(0, offset, per_rank)).sum();
        const auto got = ls::autograd::grad({p}, {x, w});  // of the sum of every rank's p
        CHECK(max_diff(got[0], ref[0].narrow(0, offset, per_rank)) < kTolerance);
        Tensor dw = got[1].clone();  // this rank's part: the weight's gradient summed as DDP would
        pg->allreduce(dw)->wait(std::chrono::seconds(30));
        CHECK(max_diff(dw, ref[1]) < kTolerance);
      },
      std::chrono::seconds(60));
}

}  // namespace

TEST_CASE("sync_batch_norm double backward: 1 rank equals batch_norm") {
  check_penalty_against_local(1, 4);
}

TEST_CASE("sync_batch_norm double backward: 2 ranks equal batch_norm on the concatenated batch") {
  check_penalty_against_local(2, 2);
}
