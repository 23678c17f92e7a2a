// tests/distributed/test_zero_deferred.cpp — Note [ZeRO broadcasts overlap the
// next forward]: step() returns with each parameter's broadcast attached to its
// storage (Note [Pending writes]); the first touch — an op, a read, a collective
// — waits for it and sees the updated values; results equal step() waiting for
// every broadcast, and plain DDP, bitwise; a peer that dies leaves the next
// forward with the optimizer's error, not a hang or stale values.
// Read before: distributed/zero/zero_broadcasts.cpp, tests/distributed/zero_test_util.h.
#include <doctest/doctest.h>

#include <csignal>
#include <string>

#include "tests/distributed/zero_test_util.h"
#include "tests/support/errors.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;
using ls::testing::ZeroMode;
using ls::testing::ZeroOpt;
using ls::testing::ZeroRun;

namespace {

// fc1.weight (300 x 300 floats, 352 KiB) is broadcast in place, the rest packed.
std::shared_ptr<ls::testing::TanhMLP> two_layer() { return std::make_shared<ls::testing::TanhMLP>(300, 300, 3); }

bool pending(const ls::Tensor& p) { return p.impl()->storage->has_pending_write(); }

}  // namespace

TEST_CASE("zero deferred broadcasts: every mode equals plain DDP with step() waiting and with the waits deferred") {
  ls::testing::run_ranks(2, [](int) {
    auto pg = dist::init_process_group("gloo");
    ZeroRun run;
    run.steps = 3;
    run.zero_options = [](dist::ZeroOptions& o) { o.defer_broadcast_waits(false); };
    ls::testing::check_equals_plain(pg, run);
    run.zero_options = nullptr;  // the default: deferred
    ls::testing::check_equals_plain(pg, run);
  }, 120s);
}

TEST_CASE("zero deferred broadcasts: after step() the parameters a rank receives are pending, reading, a forward "
          "and backward, and a collective on one see the updated values") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    ls::manual_seed(0);
    auto net = two_layer();
    auto ref_net = two_layer();
    ref_net->load_state_dict(net->state_dict());
    dist::ZeroRedundancyOptimizer zero(net->parameters(), pg, ls::optim::AdamWOptions(1e-2));
    ls::optim::AdamW ref(ref_net->parameters(), ls::optim::AdamWOptions(1e-2));
    REQUIRE(zero.zero_options().defer_broadcast_waits());
    const std::vector<ls::Tensor> params = net->parameters();
    ls::manual_seed(7);  // the same batch on both ranks: the same gradients without DDP
    const ls::Tensor x = ls::randn({4, 300});
    for (int step = 0; step < 3; ++step) {
      CAPTURE(step);
      zero.zero_grad();
      ref.zero_grad();
      // The forward touches every parameter: each waits for the last step's broadcast here.
      const ls::Tensor loss = net->forward(x).pow(2).sum();
      const ls::Tensor ref_loss = ref_net->forward(x).pow(2).sum();
      CHECK(loss.item<float>() == ref_loss.item<float>());
      loss.backward();  // the saved weights' versions were bumped before the forward: no "modified in place"
      ref_loss.backward();
      zero.step();
      ref.step();
      int received = 0;
      for (size_t i = 0; i < params.size(); ++i) {
        CAPTURE(i);
        if (zero.owner(i) != rank) {
          CHECK(pending(params[i]));  // attached, not waited for, until touched
          ++received;
        }
      }
      CHECK(received > 0);
      if (step == 1) {
        // A collective on a pending parameter waits for it on the issuing thread
        // (the worker would not): rank 0 broadcasts what it holds after the step.
        ls::Tensor w = params[0];
        pg->broadcast(w, 0)->wait();
      }
    }
    for (size_t i = 0; i < params.size(); ++i) {
      CAPTURE(i);
      CHECK(ls::equal(params[i], ref_net->parameters()[i]));  // reading waits
      CHECK_FALSE(pending(params[i]));
    }
  }, 60s);
}

TEST_CASE("zero deferred broadcasts: a peer that dies before its broadcasts fails the next forward with the "
          "optimizer's error, naming the rank, without a hang") {
  auto results = ls::testing::launch_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(10s));
    ls::manual_seed(0);
    auto net = two_layer();
    dist::ZeroRedundancyOptimizer zero(net->parameters(), pg, ls::optim::AdamWOptions(1e-2));
    ls::manual_seed(7);
    const ls::Tensor x = ls::randn({4, 300});
    std::string message;
    int step = 0;
    try {
      for (; step < 3; ++step) {
        zero.zero_grad();
        net->forward(x).pow(2).sum().backward();
        if (rank == 1 && step == 1) std::raise(SIGKILL);  // before its step(): its broadcasts never start
        zero.step();  // rank 0: returns with its receives pending
      }
    } catch (const std::exception& e) {
      message = e.what();
    }
    // Step 1's forward (when rank 1's step-0 sends were still on its queue as it
    // died) or step 2's (the receives step 1's step() left pending) touched a
    // parameter rank 1 owns.
    CHECK((step == 1 || step == 2));
    CHECK_MESSAGE(ls::testing::contains(message, "ZeroRedundancyOptimizer (rank 0): the broadcast of rank 1's "
                                                 "updated parameters failed"), message);
    CHECK_MESSAGE(ls::testing::contains(message, "A peer rank has probably died"), message);
  }, 60s);
  CHECK(results[1].signal == SIGKILL);
  CHECK_MESSAGE(results[0].ok(), results[0].describe());
}
