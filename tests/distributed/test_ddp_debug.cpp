// tests/distributed/test_ddp_debug.cpp — LOCKSTEP_DISTRIBUTED_DEBUG (Note [DDP
// debug levels], distributed/ddp/ddp_debug.h): INFO prints the bucket layout on
// rank 0, DETAIL on every rank plus the parameters without a gradient after each
// backward, by name; an unknown value is an error naming the variable. Each rank
// sends its stderr to a file while DDP runs and the test reads it back.
// Read before: tests/distributed/test_ddp_misuse.cpp (BranchyMLP's unused branch).
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "distributed/distributed.h"
#include "optim/optim.h"
#include "tests/distributed/ddp_test_models.h"
#include "tests/support/errors.h"
#include "tests/support/multiprocess.h"
#include "tests/support/stderr_capture.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using ls::testing::BranchyMLP;
using lockstep::testing::contains;
using lockstep::testing::error_of;
using lockstep::testing::stderr_of;

namespace {

// Two synced iterations of BranchyMLP under DDP with find_unused_parameters;
// rank 0 never uses `side`, rank 1 uses it in the second iteration only.
void train_branchy(int rank) {
  auto pg = dist::init_process_group("gloo");
  ls::manual_seed(0);
  auto model = std::make_shared<BranchyMLP>();
  dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().find_unused_parameters(true).bucket_cap_mb(0));
  ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1));
  for (int it = 0; it < 2; ++it) {
    ls::manual_seed(10 + rank);
    ls::Tensor x = ls::randn({4, 6});
    ddp.forward(x, rank == 1 && it == 1).sum().backward();
    opt.step();
    opt.zero_grad();
  }
}

}  // namespace

TEST_CASE("ddp debug: INFO prints the bucket layout by name on rank 0 only") {
  ls::testing::run_ranks(2, [](int rank) {
    setenv("LOCKSTEP_DISTRIBUTED_DEBUG", "INFO", 1);
    const std::string out = stderr_of([&] { train_branchy(rank); });
    if (rank == 0) {
      CHECK(contains(out, "DDP (rank 0): 6 bucket(s) at construction"));
      CHECK(contains(out, "bucket 0: "));
      CHECK(contains(out, "fc2.bias"));
      CHECK(contains(out, "side.weight"));
    } else {
      CHECK_FALSE(contains(out, "bucket(s) at construction"));
    }
    CHECK_FALSE(contains(out, "got no gradient"));  // DETAIL only
  });
}

TEST_CASE("ddp debug: DETAIL names the parameters without a gradient after each backward") {
  ls::testing::run_ranks(2, [](int rank) {
    setenv("LOCKSTEP_DISTRIBUTED_DEBUG", "detail", 1);
    const std::string out = stderr_of([&] { train_branchy(rank); });
    CHECK(contains(out, "DDP (rank " + std::to_string(rank) + "): 6 bucket(s) at construction"));
    // Iteration 1: nobody uses side; iteration 2: rank 1 does.
    const bool names_side = contains(out, "got no gradient on this rank: 'side.weight', 'side.bias'") ||
                            contains(out, "got no gradient on this rank: 'side.bias', 'side.weight'");
    CHECK(names_side);
    CHECK(contains(out, "backward #1: 2 parameter(s) got no gradient on this rank"));
    CHECK(contains(out, "2 unused on every rank"));
    if (rank == 0) {
      CHECK(contains(out, "backward #2: 2 parameter(s) got no gradient on this rank"));
    } else {
      CHECK(contains(out, "backward #2: 0 parameter(s) got no gradient on this rank; 0 unused on every rank"));
    }
  });
}

TEST_CASE("ddp debug: an unknown LOCKSTEP_DISTRIBUTED_DEBUG value is an error naming the variable") {
  ls::testing::run_ranks(1, [](int) {
    setenv("LOCKSTEP_DISTRIBUTED_DEBUG", "VERBOSE", 1);
    const std::string e = error_of([] {
      auto pg = dist::init_process_group("gloo");
      auto model = std::make_shared<BranchyMLP>();
      dist::DistributedDataParallel ddp(model, pg);
    });
    CHECK(contains(e, "LOCKSTEP_DISTRIBUTED_DEBUG='VERBOSE' is not a debug level; use OFF, INFO or DETAIL"));
  });
}
