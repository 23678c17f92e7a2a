// tests/distributed/test_ddp_join.cpp — uneven inputs with join() (Note [Join:
// shadowing the collectives], distributed/ddp/ddp_join.h): ranks with 3 and 5
// batches neither hang nor diverge and end with the parameters of local
// training on the batches that exist, the gradient divided by the initial world
// size or by the ranks still training; DDP goes on normally afterwards; three
// ranks with find_unused_parameters, gradient_as_bucket_view, no_sync
// micro-batches, a bucket rebuild whose source rank 0 has already joined, and a
// two-stage PowerSGD hook the joined ranks must shadow; throw_on_early_termination
// stops every rank, naming the rank that ran out.
// Read before: distributed/ddp/ddp_join.h, distributed/ddp/reducer_join.cpp.
#include <doctest/doctest.h>

#include "tests/distributed/ddp_beyond_util.h"
#include "tests/support/errors.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;

namespace {
constexpr int64_t kPerRank = 4;
using lockstep::testing::contains;
}  // namespace

TEST_CASE("ddp join: ranks with 3 and 5 batches end with the parameters of local training on those batches") {
  for (bool divide_by_initial : {true, false}) {
    CAPTURE(divide_by_initial);
    ls::testing::run_ranks(2, [divide_by_initial](int rank) {
      constexpr int world = 2, kMaxSteps = 5;
      const int batches[world] = {3, 5};
      auto [x, y] = ls::testing::image_data(kMaxSteps * world * kPerRank, 321);
      auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s));
      ls::manual_seed(0);
      auto model = std::make_shared<ls::testing::TinyCNN>();
      dist::DistributedDataParallel ddp(model, pg);
      ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
      auto train_step = [&](int64_t chunk) {
        ls::cross_entropy(ddp.forward(ls::testing::chunk_rows(x, chunk, kPerRank)),
                          ls::testing::chunk_rows(y, chunk, kPerRank)).backward();
        opt.step();
        opt.zero_grad();
      };
      ddp.join([&] {
        for (int step = 0; step < batches[rank]; ++step) train_step(step * world + rank);
      }, dist::JoinOptions().divide_by_initial_world_size(divide_by_initial));
      ls::testing::check_same_on_all_ranks(model->parameters(), *pg);

      // Local: step s averages the chunks of the ranks that still had a batch.
      ls::manual_seed(0);
      auto local = std::make_shared<ls::testing::TinyCNN>();
      ls::optim::SGD local_opt(local->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
      for (int step = 0; step < kMaxSteps; ++step) {
        const int active = (step < batches[0]) + (step < batches[1]);
        const double divisor = divide_by_initial ? world : active;
        for (int r = 0; r < world; ++r) {
          if (step >= batches[r]) continue;
          const int64_t chunk = step * world + r;
          (ls::cross_entropy(local->forward(ls::testing::chunk_rows(x, chunk, kPerRank)),
                             ls::testing::chunk_rows(y, chunk, kPerRank)) / divisor).backward();
        }
        local_opt.step();
        local_opt.zero_grad();
      }
      const double diff = ls::testing::max_abs_diff(model->parameters(), local->parameters());
      CHECK_MESSAGE(diff < 2e-5, "max |ddp - local| = " << diff);

      // After join every rank's DDP is at the same point: training goes on.
      ls::manual_seed(900 + rank);
      ls::cross_entropy(ddp.forward(ls::randn({kPerRank, 3, 8, 8})), ls::randint(0, 5, {kPerRank})).backward();
      ls::testing::check_same_on_all_ranks(ls::testing::grads_of(model->parameters()), *pg);
    }, 60s);
  }
}

TEST_CASE("ddp join: 3 ranks with unused parameters, bucket views, no_sync, a rebuild and a PowerSGD hook") {
  ls::testing::run_ranks(3, [](int rank) {
    constexpr int world = 3, kMaxSteps = 3, kMicro = 2;
    const int batches[world] = {1, 3, 2};  // rank 0, the usual source of the bucket order, leaves first
    auto use_side = [](int step, int r, int micro) { return (step + r + micro) % 3 == 0; };
    auto input = [](int step, int r, int micro) {
      ls::manual_seed(1000 + 100 * step + 10 * r + micro);
      return ls::randn({kPerRank, 6});
    };
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s));
    ls::manual_seed(0);
    auto model = std::make_shared<ls::testing::BranchyMLP>();
    dist::DistributedDataParallel ddp(
        model, pg, dist::DDPOptions().bucket_cap_mb(0).find_unused_parameters(true).gradient_as_bucket_view(true));
    // Full rank: exact up to rounding, so the result can be compared with local training.
    auto state = std::make_shared<dist::comm_hooks::PowerSGDState>(
        pg, dist::comm_hooks::PowerSGDOptions().matrix_approximation_rank(64).start_powersgd_iter(0)
                .min_compression_rate(0));
    ddp.register_comm_hook(state, dist::comm_hooks::powersgd_hook);
    ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
    ddp.join([&] {
      for (int step = 0; step < batches[rank]; ++step) {
        {
          auto guard = ddp.no_sync();
          ddp.forward(input(step, rank, 0), use_side(step, rank, 0)).pow(2.0).mean().backward();
        }
        ddp.forward(input(step, rank, 1), use_side(step, rank, 1)).pow(2.0).mean().backward();
        opt.step();
        opt.zero_grad();
      }
    });
    CHECK(ddp.reducer().has_rebuilt_buckets());  // also on rank 0, which shadowed it
    CHECK(state->iteration() == kMaxSteps);      // every rank ran the hook once per synced backward
    CHECK(state->compressed_buckets() > 0);
    ls::testing::check_same_on_all_ranks(model->parameters(), *pg);

    ls::manual_seed(0);
    auto local = std::make_shared<ls::testing::BranchyMLP>();
    ls::optim::SGD local_opt(local->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < kMaxSteps; ++step) {
      for (int r = 0; r < world; ++r) {
        if (step >= batches[r]) continue;
        for (int micro = 0; micro < kMicro; ++micro) {
          (local->forward(input(step, r, micro), use_side(step, r, micro)).pow(2.0).mean() / double(world)).backward();
        }
      }
      local_opt.step();
      local_opt.zero_grad();
    }
    const double diff = ls::testing::max_abs_diff(model->parameters(), local->parameters());
    CHECK_MESSAGE(diff < 2e-5, "max |ddp - local| = " << diff);
  }, 90s);
}

TEST_CASE("ddp join: throw_on_early_termination stops every rank naming the rank that ran out") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s));
    ls::manual_seed(0);
    auto model = std::make_shared<ls::testing::BranchyMLP>();
    dist::DistributedDataParallel ddp(model, pg);
    const int batches = rank == 0 ? 2 : 4;
    int steps_done = 0;
    std::string message = "(no error)";
    try {
      ddp.join([&] {
        for (int step = 0; step < batches; ++step) {
          ls::manual_seed(10 * step + rank);
          ddp.forward(ls::randn({kPerRank, 6}), true).sum().backward();
          ++steps_done;
        }
      }, dist::JoinOptions().throw_on_early_termination(true));
    } catch (const ls::Error& e) {
      message = e.what();
    }
    CHECK(steps_done == 2);  // rank 1 stops in the forward of its third batch
    CHECK_MESSAGE(contains(message, "DDP join (rank " + std::to_string(rank) + "): rank 0 ran out of inputs "
                                    "while rank 1 still had some"), message);
    CHECK_MESSAGE(contains(message, "throw_on_early_termination"), message);
  }, 60s);
}
