// tests/distributed/test_zero_silent.cpp — ZeRO misuses that once passed silently: a
// consolidate_state_dict on one rank while the other steps (once: int64 bytes
// written into float parameters, exit 0) is caught by the collective checks
// (Note [Collective fingerprints]) on both ranks; an optimizer destroyed with a
// failed broadcast reports it on stderr and in the store (Note [ZeRO destructor
// reports]) instead of swallowing it.
// Read before: distributed/zero/zero_redundancy_optimizer.h,
// distributed/process_group/collective_check.h.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "distributed/store/store.h"
#include "tests/distributed/zero_test_util.h"
#include "tests/support/errors.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;
using ls::testing::contains;

namespace {

std::shared_ptr<ls::testing::TanhMLP> small_net() { return std::make_shared<ls::testing::TanhMLP>(20, 16, 3); }

void backward_once(ls::testing::TanhMLP& net) {
  ls::manual_seed(7);
  net.forward(ls::randn({4, 20})).pow(2).sum().backward();
}

}  // namespace

TEST_CASE("zero misuse: consolidate_state_dict on one rank while the other steps is an error on both") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s));
    ls::manual_seed(0);
    auto net = small_net();
    dist::ZeroRedundancyOptimizer zero(net->parameters(), pg, ls::optim::AdamWOptions(1e-2));
    backward_once(*net);
    zero.step();
    zero.wait_for_broadcasts();
    backward_once(*net);
    std::string msg = ls::testing::error_of([&] {
      if (rank == 0) {
        zero.consolidate_state_dict(0);
      } else {
        zero.step();
        zero.wait_for_broadcasts();
      }
    });
    CHECK_MESSAGE(contains(msg, "mismatched collectives"), msg);
    CHECK_MESSAGE(contains(msg, "rank " + std::to_string(1 - rank) + " issued"), msg);
  }, 60s);
}

TEST_CASE("zero misuse: an optimizer destroyed with a failed broadcast says so on stderr and in the store") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(5s));
    ls::manual_seed(0);
    auto net = small_net();
    const std::string log = "/tmp/lockstep_zero_silent_" + std::to_string(getppid()) + "_" + std::to_string(rank);
    {
      dist::ZeroRedundancyOptimizer zero(net->parameters(), pg, ls::optim::AdamWOptions(1e-2));
      zero.register_forward_waits(*net);  // step() leaves the waits to the next forward
      backward_once(*net);
      if (rank == 0) zero.step();  // alone: rank 1 exits without stepping, its broadcasts never come
      REQUIRE(std::freopen(log.c_str(), "w", stderr) != nullptr);
    }  // ~ZeroRedundancyOptimizer on rank 0 finds the failed broadcast
    std::fflush(stderr);
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    std::remove(log.c_str());
    if (rank == 0) {
      CHECK_MESSAGE(contains(text.str(), "ZeroRedundancyOptimizer (rank 0): destroyed while parameter broadcasts of "
                                         "its last step() had failed"), text.str());
      auto store = pg->store();
      REQUIRE(store != nullptr);
      CHECK(store->check({"lockstep/zero_failures/0"}));
    }
  }, 60s);
}
