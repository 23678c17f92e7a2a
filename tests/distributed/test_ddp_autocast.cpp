// tests/distributed/test_ddp_autocast.cpp — DDP under AutocastGuard: gradients stay
// float32 and reduce as before, ranks stay bitwise equal, and 2 ranks track one
// process that runs the same bf16 forward passes.
#include <doctest/doctest.h>

#include "core/autocast.h"
#include "distributed/distributed.h"
#include "optim/optim.h"
#include "tests/distributed/ddp_test_models.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using ls::testing::TinyCNN;

namespace {

constexpr int kSteps = 3;
constexpr int64_t kPerRank = 4;

ls::Tensor rows(const ls::Tensor& t, int64_t chunk) { return t.narrow(0, chunk * kPerRank, kPerRank); }

// One process: each rank's chunk forward under autocast, gradients averaged by hand.
std::vector<ls::Tensor> train_locally(int world, const ls::Tensor& x, const ls::Tensor& y) {
  ls::manual_seed(0);
  auto model = std::make_shared<TinyCNN>();
  ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < world; ++r) {
      const int64_t chunk = step * world + r;
      ls::Tensor loss;
      {
        ls::AutocastGuard amp(ls::kBFloat16);
        loss = ls::cross_entropy(model->forward(rows(x, chunk)), rows(y, chunk));
      }
      (loss / static_cast<double>(world)).backward();
    }
    opt.step();
    opt.zero_grad();
  }
  return ls::testing::clone_all(model->parameters());
}

void check_ddp_autocast(dist::DDPOptions options, bool bf16_hook) {
  const int world = 2;
  ls::testing::run_ranks(world, [=](int rank) {
    auto [x, y] = ls::testing::image_data(kSteps * world * kPerRank, 321);
    auto pg = dist::init_process_group("gloo");
    ls::manual_seed(rank == 0 ? 0 : 77 + rank);
    auto model = std::make_shared<TinyCNN>();
    dist::DistributedDataParallel ddp(model, pg, options);
    if (bf16_hook) ddp.register_comm_hook(pg, dist::comm_hooks::bf16_compress_hook);
    ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < kSteps; ++step) {
      const int64_t chunk = step * world + rank;
      ls::Tensor loss;
      {
        ls::AutocastGuard amp(ls::kBFloat16);
        loss = ls::cross_entropy(ddp.forward(rows(x, chunk)), rows(y, chunk));
      }
      loss.backward();
      for (auto& p : model->parameters()) CHECK(p.grad().dtype() == ls::kFloat32);
      opt.step();
      opt.zero_grad();
    }
    for (auto& p : model->parameters()) {  // bitwise equal on every rank
      ls::Tensor mine = p.detach().clone();
      std::vector<ls::Tensor> all;
      pg->allgather(all, mine)->wait();
      for (int r = 0; r < world; ++r) CHECK(ls::equal(all[r], mine));
    }
    const double diff =
        ls::testing::max_abs_diff(model->parameters(), train_locally(world, x, y));
    INFO("max |ddp - local| = ", diff);
    // The same bf16 forwards; only the float32 gradient sums differ in order
    // (and, with the bf16 hook, the gradients travel rounded to bf16).
    CHECK(diff < (bf16_hook ? 5e-3 : 1e-4));
  }, std::chrono::seconds(120));
}

}  // namespace

TEST_CASE("ddp autocast: 2 ranks under AutocastGuard match one process, bitwise across ranks") {
  check_ddp_autocast(dist::DDPOptions(), /*bf16_hook=*/false);
}

TEST_CASE("ddp autocast: composes with the bf16 compression hook and gradient_as_bucket_view") {
  check_ddp_autocast(dist::DDPOptions().gradient_as_bucket_view(true), /*bf16_hook=*/true);
}
