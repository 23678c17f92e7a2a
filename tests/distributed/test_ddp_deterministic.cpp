// tests/distributed/test_ddp_deterministic.cpp — DDPOptions().deterministic(true)
// (Note [Deterministic reduction] in distributed/ddp/deterministic_reduction.h):
// at 3 and 4 ranks, parameters after several SGD steps are bitwise equal across
// bucket_cap_mb 0 / 0.002 / 1 / 25, with and without gradient_as_bucket_view,
// and across two runs; they agree with ordinary DDP up to rounding; the comm
// hook form gives the same bits; a hook cannot be combined with the option.
// Read before: distributed/ddp/deterministic_reduction.h, tests/distributed/ddp_beyond_util.h.
#include <doctest/doctest.h>

#include "distributed/comm_hooks/deterministic_hook.h"
#include "tests/distributed/ddp_beyond_util.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
namespace hooks = lockstep::distributed::comm_hooks;
using CNN = ls::testing::TinyCNN;

namespace {

constexpr int64_t kPerRank = 3;
constexpr int kSteps = 4;

// TinyCNN, kSteps SGD-momentum steps through DDP with `options`; returns the parameters.
std::vector<ls::Tensor> train(const std::shared_ptr<dist::ProcessGroup>& pg, const dist::DDPOptions& options,
                              bool hook = false) {
  const int world = pg->size(), rank = pg->rank();
  auto [x, y] = ls::testing::image_data(kSteps * world * kPerRank, 321);
  ls::manual_seed(0);
  auto model = std::make_shared<CNN>();
  dist::DistributedDataParallel ddp(model, pg, options);
  if (hook) ddp.register_comm_hook(pg, hooks::deterministic_allreduce_hook);
  ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < kSteps; ++step) {
    const int64_t chunk = step * world + rank;
    ls::cross_entropy(ddp.forward(ls::testing::chunk_rows(x, chunk, kPerRank)),
                      ls::testing::chunk_rows(y, chunk, kPerRank)).backward();
    opt.step();
    opt.zero_grad();
  }
  return ls::testing::clone_all(model->parameters());
}

void check_deterministic(int world) {
  ls::testing::run_ranks(world, [](int) {
    auto pg = dist::init_process_group("gloo");
    const auto det = [](double cap) { return dist::DDPOptions().bucket_cap_mb(cap).first_bucket_mb(cap).deterministic(true); };
    const auto reference = train(pg, det(25));
    ls::testing::check_same_on_all_ranks(reference, *pg);
    for (double cap : {0.0, 0.002, 1.0}) {
      CAPTURE(cap);
      CHECK(ls::testing::all_equal(reference, train(pg, det(cap))));
    }
    CHECK(ls::testing::all_equal(reference, train(pg, det(0.002).gradient_as_bucket_view(true))));
    CHECK(ls::testing::all_equal(reference, train(pg, det(25))));  // a second run
    // The hook form without the option: the same bits.
    CHECK(ls::testing::all_equal(reference, train(pg, dist::DDPOptions().bucket_cap_mb(0.002), /*hook=*/true)));
    // Still the average: ordinary DDP differs by rounding only.
    const double diff = ls::testing::max_abs_diff(reference, train(pg, dist::DDPOptions()));
    CHECK(diff < 1e-5);
  });
}

}  // namespace

TEST_CASE("ddp deterministic: bitwise equal parameters across bucket sizes and runs at 3 ranks") {
  check_deterministic(3);
}

TEST_CASE("ddp deterministic: bitwise equal parameters across bucket sizes and runs at 4 ranks") {
  check_deterministic(4);
}

TEST_CASE("ddp deterministic: a communication hook cannot be registered with the option") {
  ls::testing::run_ranks(2, [](int) {
    auto pg = dist::init_process_group("gloo");
    ls::manual_seed(0);
    auto model = std::make_shared<CNN>();
    dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().deterministic(true));
    CHECK_THROWS_WITH_AS(ddp.register_comm_hook(pg, hooks::deterministic_allreduce_hook),
                         doctest::Contains("deterministic"), ls::Error);
  });
}
