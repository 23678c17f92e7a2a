// tests/distributed/test_ddp_replica_check.cpp — the periodic replica check (Note [Replica
// divergence check]): the hash and the error text, then with real ranks: equal
// replicas pass every check, and a per-rank learning rate, a forward that
// bypasses ddp.forward on one rank, and no_sync() on one rank only are caught
// within K iterations on every rank, naming the ranks — no silent drift, no hang.
// With the optimizer registered (Note [Optimizer step check]), an optimizer that
// took a step more on one rank is named by its step count, even when that step
// left the parameters unchanged.
// Read before: distributed/ddp/replica_check.h, distributed/ddp/optimizer_step_check.h.
#include <doctest/doctest.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "core/grad_mode.h"
#include "distributed/ddp/replica_check.h"
#include "distributed/distributed.h"
#include "optim/optim.h"
#include "tests/distributed/ddp_test_models.h"
#include "tests/support/errors.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;
using lockstep::testing::contains;

namespace {

constexpr auto kTimeout = std::chrono::seconds(60);

// Trains up to `steps` iterations, step(i) running forward + backward; returns
// the iteration whose call threw and the message, or {-1, ""}.
struct Stop {
  int step = -1;
  std::string message;
};
Stop train(ls::optim::SGD& opt, int steps, const std::function<void(int)>& step) {
  for (int i = 0; i < steps; ++i) {
    try {
      opt.zero_grad();
      step(i);
      opt.step();
    } catch (const std::exception& e) {
      return {i, e.what()};
    }
  }
  return {};
}

}  // namespace

TEST_CASE("replica check: the hash sees every byte, and agreeing ranks give no message") {
  ls::Tensor a = ls::randn({1001});
  ls::Tensor b = a.clone();
  CHECK(dist::detail::tensor_bytes_hash(a) == dist::detail::tensor_bytes_hash(b));
  b.data_ptr<float>()[1000] = std::nextafter(b.data_ptr<float>()[1000], 1e9f);  // the tail, one ulp
  CHECK(dist::detail::tensor_bytes_hash(a) != dist::detail::tensor_bytes_hash(b));
  ls::Tensor c = a.clone();
  c.data_ptr<float>()[3] = -c.data_ptr<float>()[3];
  CHECK(dist::detail::tensor_bytes_hash(a) != dist::detail::tensor_bytes_hash(c));
  std::vector<std::vector<int64_t>> same(3, {10, 2, 7, 8});
  CHECK(dist::detail::describe_replica_divergence(same, {"w", "b"}, 5, 1).empty());
}

TEST_CASE("replica check: the error groups the ranks and names the first differing parameter") {
  std::vector<std::vector<int64_t>> all = {{100, 2, 7, 8}, {100, 2, 7, 9}, {100, 2, 7, 8}, {100, 2, 7, 9}};
  std::string msg = dist::detail::describe_replica_divergence(all, {"fc1.weight", "fc2.bias"}, 50, 3);
  CHECK_MESSAGE(contains(msg, "DDP replica check (rank 3): the replicas' parameters differ at synced iteration 100 "
                              "(they were equal at iteration 50): ranks 0, 2 and ranks 1, 3 hold 2 different sets"), msg);
  CHECK_MESSAGE(contains(msg, "(this rank: ranks 1, 3)"), msg);
  CHECK_MESSAGE(contains(msg, "the first that differs is 'fc2.bias'"), msg);
  CHECK_MESSAGE(contains(msg, "no_sync() entered on some ranks only"), msg);
  std::vector<std::vector<int64_t>> apart = {{100, 2, 7, 8}, {101, 2, 7, 8}};
  std::string at = dist::detail::describe_replica_divergence(apart, {"w", "b"}, 0, 0);
  CHECK_MESSAGE(contains(at, "rank 0 is at synced forward #100 with 2 parameters, rank 1 at #101"), at);
}

TEST_CASE("replica check: equal replicas pass a check every iteration, bad LOCKSTEP_REPLICA_CHECK_EVERY is an error") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s));
    ls::manual_seed(0);
    auto model = std::make_shared<ls::testing::TinyCNN>();
    dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().check_replicas_every(1));
    CHECK(ddp.options().check_replicas_every() == 1);
    ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
    Stop stop = train(opt, 6, [&](int i) {
      ls::manual_seed(100 + 2 * i + rank);
      ddp.forward(ls::randn({2, 3, 8, 8})).pow(2).sum().backward();
    });
    CHECK_MESSAGE(stop.step == -1, stop.message);
    setenv("LOCKSTEP_REPLICA_CHECK_EVERY", "often", 1);
    std::string bad = lockstep::testing::error_of([&] { dist::DistributedDataParallel again(model, pg); });
    CHECK_MESSAGE(contains(bad, "LOCKSTEP_REPLICA_CHECK_EVERY='often' is not an integer between 0 and 1000000000"), bad);
  }, kTimeout);
}

TEST_CASE("replica check: a learning rate that differs per rank is caught within K iterations on every rank") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s));
    ls::manual_seed(0);
    auto model = std::make_shared<ls::testing::TinyCNN>();
    dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().check_replicas_every(3));
    ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(rank == 0 ? 0.1 : 0.2));
    Stop stop = train(opt, 10, [&](int i) {
      ls::manual_seed(100 + 2 * i + rank);
      ddp.forward(ls::randn({2, 3, 8, 8})).pow(2).sum().backward();
    });
    CHECK(stop.step == 2);  // the third synced forward: the first check, one step after they parted
    CHECK_MESSAGE(contains(stop.message, "DDP replica check (rank " + std::to_string(rank) +
                                             "): the replicas' parameters differ at synced iteration 3 (they were "
                                             "equal at construction): rank 0 and rank 1 hold 2 different sets"),
                  stop.message);
    CHECK_MESSAGE(contains(stop.message, "the first that differs is 'conv1.weight'"), stop.message);
  }, kTimeout);
}

TEST_CASE("replica check: a forward that bypasses ddp.forward, or no_sync on one rank, stops every rank") {
  for (int misuse = 0; misuse < 2; ++misuse) {
    CAPTURE(misuse);
    ls::testing::run_ranks(2, [misuse](int rank) {
      auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s));
      ls::manual_seed(0);
      auto model = std::make_shared<ls::testing::BranchyMLP>();  // no buffers
      dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().check_replicas_every(4));
      ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1));
      Stop stop = train(opt, 12, [&](int i) {
        ls::manual_seed(100 + 2 * i + rank);
        ls::Tensor x = ls::randn({4, 6});
        if (rank == 0 && i == 1) {
          if (misuse == 0) {
            model->forward(x, true).sum().backward();  // not through DDP: local gradients only
          } else {
            auto guard = ddp.no_sync();
            ddp.forward(x, true).sum().backward();
          }
          return;
        }
        ddp.forward(x, true).sum().backward();
      });
      // The bypassing rank (0) ran one synced forward fewer, so it checks one iteration later.
      CHECK(stop.step == (rank == 0 ? 4 : 3));
      CHECK_MESSAGE(contains(stop.message, "DDP replica check (rank " + std::to_string(rank) +
                                               "): the replicas' parameters differ at synced iteration 4"),
                    stop.message);
      CHECK_MESSAGE(contains(stop.message, "rank 0 and rank 1 hold 2 different sets of parameters"), stop.message);
      CHECK_MESSAGE(contains(stop.message, "the first that differs is 'fc1.weight'"), stop.message);
      CHECK_MESSAGE(contains(stop.message, "a forward through the module itself instead of ddp.forward on some rank"),
                    stop.message);
    }, kTimeout);
  }
}

TEST_CASE("replica check: the step-count message groups the ranks and names an unregistered optimizer") {
  using dist::detail::OptimizerSteps;
  CHECK(dist::detail::describe_step_divergence({{4, 8}, {4, 8}}, 5, 0, 0).empty());
  std::string msg = dist::detail::describe_step_divergence({{4, 8}, {5, 10}, {4, 8}}, 6, 3, 1);
  CHECK_MESSAGE(contains(msg, "DDP replica check (rank 1): the optimizers' step counts differ at synced iteration 6 "
                              "(they were equal at iteration 3): ranks 0, 2: 4 steps (8 parameter updates); rank 1: "
                              "5 steps (10 parameter updates) (this rank: 5 steps"), msg);
  std::string none = dist::detail::describe_step_divergence({{4, 8}, {}}, 3, 0, 0);
  CHECK_MESSAGE(contains(none, "rank 1: no optimizer registered"), none);
}

TEST_CASE("replica check: an optimizer that took a step more on one rank is named within K iterations") {
  for (int variant = 0; variant < 2; ++variant) {
    CAPTURE(variant);
    ls::testing::run_ranks(2, [variant](int rank) {
      auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s));
      ls::manual_seed(0);
      auto model = std::make_shared<ls::testing::TinyCNN>();
      dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().check_replicas_every(3));
      ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1));  // no momentum: a zero step changes nothing
      int64_t steps = 0;
      if (variant == 0) {
        ddp.register_optimizer(opt);
      } else {
        ddp.register_step_count([&steps] { return steps; });
      }
      Stop stop = train(opt, 8, [&](int i) {
        if (rank == 1 && i == 1) {  // one extra step() over zero gradients: parameters stay bitwise equal
          for (const ls::Tensor& p : model->parameters()) p.set_grad(ls::zeros_like(p));
          opt.step();
          opt.zero_grad();
          ++steps;
        }
        ls::manual_seed(100 + 2 * i + rank);
        ddp.forward(ls::randn({2, 3, 8, 8})).pow(2).sum().backward();
        ++steps;
      });
      CHECK(stop.step == 2);  // the first check, at the third synced forward
      CHECK_MESSAGE(contains(stop.message, "DDP replica check (rank " + std::to_string(rank) +
                                               "): the optimizers' step counts differ at synced iteration 3"),
                    stop.message);
      if (variant == 0) {
        CHECK_MESSAGE(contains(stop.message, "rank 0: 2 steps ("), stop.message);
        CHECK_MESSAGE(contains(stop.message, "; rank 1: 3 steps ("), stop.message);
      } else {
        CHECK_MESSAGE(contains(stop.message, "rank 0: 2 steps (2 parameter updates); rank 1: 3 steps (3 parameter updates)"),
                      stop.message);
      }
    }, kTimeout);
  }
}

TEST_CASE("replica check: ddp.check_replicas() compares at once, with the periodic check off, naming the parameter") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s));
    ls::manual_seed(0);
    auto model = std::make_shared<ls::testing::TinyCNN>();
    dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().check_replicas_every(0));  // periodic: off
    ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1));
    int64_t steps = 0;
    ddp.register_step_count([&steps] { return steps; });
    Stop stop = train(opt, 3, [&](int i) {
      ls::manual_seed(100 + 2 * i + rank);
      ddp.forward(ls::randn({2, 3, 8, 8})).pow(2).sum().backward();
      ++steps;
    });
    REQUIRE_MESSAGE(stop.step == -1, stop.message);
    ddp.check_replicas();  // equal replicas: no error (a checkpoint would be written)
    // One more step counted on rank 0 only: named by the counts, though the parameters agree.
    if (rank == 0) ++steps;
    std::string counts = lockstep::testing::error_of([&] { ddp.check_replicas(); });
    CHECK_MESSAGE(contains(counts, "DDP replica check (rank " + std::to_string(rank) + "): the optimizers' step "
                                   "counts differ at synced iteration 3 (they were equal at iteration 3): rank 0: 4 "
                                   "steps (4 parameter updates); rank 1: 3 steps"),
                  counts);
    if (rank == 0) --steps;
    // The last parameter changed on rank 1 only: every rank names it.
    if (rank == 1) {
      ls::NoGradGuard no_grad;
      ls::Tensor last = model->parameters().back();
      last.add_(1e-3);
    }
    std::string params = lockstep::testing::error_of([&] { ddp.check_replicas(); });
    CHECK_MESSAGE(contains(params, "the replicas' parameters differ at synced iteration 3"), params);
    CHECK_MESSAGE(contains(params, "rank 0 and rank 1 hold 2 different sets of parameters"), params);
    const std::string last_name = model->named_parameters().back().first;
    CHECK_MESSAGE(contains(params, "the first that differs is '" + last_name + "'"), params);
  }, kTimeout);
}
