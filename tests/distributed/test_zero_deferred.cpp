// tests/distributed/test_zero_deferred.cpp — Note [ZeRO broadcasts overlap the
// next forward]: step() returns with the broadcasts of the parameters of the
// registered model's layers pending; each layer's forward pre-hook waits for its
// own (the next layer's still pending), the model's state_dict() and
// wait_for_broadcasts() for all, and they see the updated values; a parameter
// of a user's module that runs no hooks is waited for in step(); results equal
// step() waiting for every broadcast, and plain DDP, bitwise; a peer that dies
// leaves the next forward with the optimizer's error, not a hang or stale values.
// Read before: distributed/zero/zero_broadcasts.cpp, tests/distributed/zero_test_util.h.
#include <doctest/doctest.h>

#include <csignal>
#include <string>

#include "core/grad_mode.h"
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

// A user's module that reads a parameter of its own in its forward: it runs no hooks.
struct ScaledMLP : ls::nn::Module {
  std::shared_ptr<ls::nn::Linear> fc;
  ls::Tensor scale;
  ScaledMLP() {
    fc = register_module("fc", std::make_shared<ls::nn::Linear>(300, 300));
    scale = register_parameter("scale", ls::ones({300}));
  }
  ls::Tensor forward(const ls::Tensor& x) { return fc->forward(x) * scale; }
};

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

TEST_CASE("zero deferred broadcasts: after step() the parameters a rank receives are pending, each layer's forward "
          "waits for its own, backward, state_dict() and a collective after wait_for_broadcasts() see the updated "
          "values") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    ls::manual_seed(0);
    auto net = two_layer();
    auto ref_net = two_layer();
    ref_net->load_state_dict(net->state_dict());
    dist::ZeroRedundancyOptimizer zero(net->parameters(), pg, ls::optim::AdamWOptions(1e-2));
    ls::optim::AdamW ref(ref_net->parameters(), ls::optim::AdamWOptions(1e-2));
    REQUIRE(zero.zero_options().defer_broadcast_waits());
    zero.register_forward_waits(*net);
    auto pending = [&](size_t i) { return zero.broadcast_pending(i); };
    const std::vector<ls::Tensor> params = net->parameters();
    ls::manual_seed(7);  // the same batch on both ranks: the same gradients without DDP
    const ls::Tensor x = ls::randn({4, 300});
    for (int step = 0; step < 3; ++step) {
      CAPTURE(step);
      zero.zero_grad();
      ref.zero_grad();
      if (step > 0) {
        // fc1's forward waits for fc1's parameters only: fc2's may still be on the
        // wire (unless the last step ended with wait_for_broadcasts(), below).
        (void)net->fc1->forward(x);
        for (size_t i = 0; i < 2; ++i) CHECK_FALSE(pending(i));
        for (size_t i = 2; i < params.size(); ++i) {
          if (zero.owner(i) != rank && step != 2) CHECK(pending(i));
        }
      }
      // Each layer waits for its parameters' broadcasts in its forward pre-hook.
      const ls::Tensor loss = net->forward(x).pow(2).sum();
      for (size_t i = 0; i < params.size(); ++i) CHECK_FALSE(pending(i));
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
          CHECK(pending(i));  // not waited for until its layer's forward
          ++received;
        }
      }
      CHECK(received > 0);
      if (step == 1) {
        // A collective on a parameter outside a forward: wait_for_broadcasts()
        // first, then rank 0 broadcasts what it holds after the step.
        zero.wait_for_broadcasts();
        for (size_t i = 0; i < params.size(); ++i) CHECK_FALSE(pending(i));
        ls::Tensor w = params[0];
        pg->broadcast(w, 0)->wait();
        CHECK(ls::equal(w, ref_net->parameters()[0]));
      }
    }
    const ls::nn::StateDict state = net->state_dict();  // its pre-hooks wait for every broadcast
    for (size_t i = 0; i < params.size(); ++i) {
      CAPTURE(i);
      CHECK_FALSE(pending(i));
      CHECK(ls::equal(params[i], ref_net->parameters()[i]));
    }
    CHECK(ls::equal(state.at("fc2.weight"), ref_net->fc2->weight));
  }, 60s);
}

TEST_CASE("zero deferred broadcasts: a peer that dies before its broadcasts fails the next forward with the "
          "optimizer's error, naming the rank, without a hang") {
  auto results = ls::testing::launch_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(10s));
    ls::manual_seed(0);
    auto net = two_layer();
    dist::ZeroRedundancyOptimizer zero(net->parameters(), pg, ls::optim::AdamWOptions(1e-2));
    zero.register_forward_waits(*net);
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

TEST_CASE("zero deferred broadcasts: a parameter of a user's module that runs no forward pre-hooks is waited for "
          "in step(), its layers' parameters in their forward, and with no model given step() waits for all") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    ls::manual_seed(0);
    auto net = std::make_shared<ScaledMLP>();
    auto ref_net = std::make_shared<ScaledMLP>();
    ref_net->load_state_dict(net->state_dict());
    dist::ZeroRedundancyOptimizer zero(net->parameters(), pg, ls::optim::AdamWOptions(1e-2));
    ls::optim::AdamW ref(ref_net->parameters(), ls::optim::AdamWOptions(1e-2));
    ls::manual_seed(7);
    const ls::Tensor x = ls::randn({4, 300});
    auto train_step = [&] {
      zero.zero_grad();
      ref.zero_grad();
      const ls::Tensor loss = net->forward(x).pow(2).sum();
      const ls::Tensor ref_loss = ref_net->forward(x).pow(2).sum();
      CHECK(loss.item<float>() == ref_loss.item<float>());
      loss.backward();
      ref_loss.backward();
      zero.step();
      ref.step();
    };
    train_step();  // no model given: nothing is left pending
    for (size_t i = 0; i < 3; ++i) CHECK_FALSE(zero.broadcast_pending(i));
    zero.register_forward_waits(*net);
    const size_t scale = 0;  // a module's own parameters come before its children's: scale, fc.weight, fc.bias
    REQUIRE(net->parameters()[scale].impl() == net->scale.impl());
    for (int step = 0; step < 2; ++step) {
      train_step();
      CHECK_FALSE(zero.broadcast_pending(scale));  // its module may read it without a hook: waited for in step()
      for (size_t i = 1; i < 3; ++i) {  // fc's
        if (zero.owner(i) != rank) CHECK(zero.broadcast_pending(i));
      }
    }
    zero.wait_for_broadcasts();
    CHECK(ls::testing::all_equal(net->parameters(), ref_net->parameters()));
  }, 60s);
}

// Note [Reads of a tensor still being written] (autograd/write_in_flight.h).
namespace {

// two_layer() under ZeRO, its waits left to the layers' forward pre-hooks, beside
// a plain-AdamW twin; step() trains both on one batch. fc1.bias (parameter 1) is
// sent packed by its owner: the other rank receives it.
struct DeferredRun {
  static constexpr size_t kBias = 1;
  std::shared_ptr<ls::testing::TanhMLP> net, ref_net;
  dist::ZeroRedundancyOptimizer<ls::optim::AdamW> zero;
  ls::optim::AdamW ref;
  ls::Tensor x;

  explicit DeferredRun(const std::shared_ptr<dist::ProcessGroup>& pg)
      : net(seeded_two_layer()),
        ref_net(two_layer()),
        zero(net->parameters(), pg, ls::optim::AdamWOptions(1e-2)),
        ref(ref_net->parameters(), ls::optim::AdamWOptions(1e-2)) {
    ref_net->load_state_dict(net->state_dict());
    zero.register_forward_waits(*net);
    REQUIRE(net->parameters()[kBias].impl() == net->fc1->bias.impl());
    REQUIRE((zero.owner(kBias) == 0 || zero.owner(kBias) == 1));
    ls::manual_seed(7);
    x = ls::randn({4, 300});
  }
  static std::shared_ptr<ls::testing::TanhMLP> seeded_two_layer() {
    ls::manual_seed(0);
    return two_layer();
  }
  void step() {
    net->forward(x).pow(2).sum().backward();
    ref_net->forward(x).pow(2).sum().backward();
    zero.step();
    ref.step();
  }
};

}  // namespace

// The receiving rank reads fc1.bias before fc1's forward through the op it would
// use for a checksum, a view made before step(), and a functional forward that
// bypasses the layer.
TEST_CASE("zero deferred broadcasts: an op that reads a parameter still being received before its layer's forward "
          "is refused naming wait_for_broadcasts(), never computed with the old values, and after it sees the new ones") {
  ls::testing::run_ranks(2, [](int rank) {
    DeferredRun run(dist::init_process_group("gloo"));
    const ls::Tensor& p = run.net->fc1->bias;
    const ls::Tensor old_view = p.view({1, 300});  // shares the storage
    const double before = p.sum().item<double>();
    run.step();
    const double after = run.ref_net->fc1->bias.sum().item<double>();
    REQUIRE(after != before);  // a stale read would be told apart
    if (run.zero.owner(DeferredRun::kBias) == rank) {
      CHECK(p.sum().item<double>() == after);  // the owner holds its update: nothing to refuse
      run.zero.wait_for_broadcasts();
      return;
    }
    REQUIRE(run.zero.broadcast_pending(DeferredRun::kBias));
    const std::string where = "ZeroRedundancyOptimizer (rank " + std::to_string(rank) + "): parameter ";
    const std::string direct = ls::testing::error_of([&] { (void)p.sum(); });
    CHECK_MESSAGE(ls::testing::contains(direct, where + "1 (shape [300]) is still being received from rank " +
                                                    std::to_string(1 - rank)), direct);
    for (const std::string& e :
         {direct, ls::testing::error_of([&] { (void)old_view.sum(); }),
          ls::testing::error_of([&] { (void)ls::nn::functional::linear(run.x, run.net->fc1->weight, p); }),
          ls::testing::error_of([&] {
            ls::NoGradGuard no_grad;
            (void)(p * 2.0);
          })}) {
      CHECK_MESSAGE(ls::testing::contains(e, where), e);  // the functional forward may name fc1.weight first
      CHECK_MESSAGE(ls::testing::contains(e, "must call wait_for_broadcasts() on the optimizer"), e);
    }
    run.zero.wait_for_broadcasts();
    CHECK_FALSE(run.zero.broadcast_pending(DeferredRun::kBias));
    CHECK(p.sum().item<double>() == after);
    CHECK(old_view.sum().item<double>() == after);
  }, 60s);
}

TEST_CASE("zero deferred broadcasts: a parameter written in place while its broadcast is in flight fails its "
          "layer's forward and every later wait, naming wait_for_broadcasts(), instead of losing the write") {
  ls::testing::run_ranks(2, [](int rank) {
    DeferredRun run(dist::init_process_group("gloo"));
    run.step();
    if (run.zero.owner(DeferredRun::kBias) == rank) {
      run.zero.wait_for_broadcasts();
      return;
    }
    {
      ls::NoGradGuard no_grad;
      run.net->fc1->bias.mul_(0.5);  // core's in-place op: no autograd op sees it, the version does
    }
    const std::string e = ls::testing::error_of([&] { (void)run.net->forward(run.x); });
    CHECK_MESSAGE(ls::testing::contains(e, "parameter 1 (shape [300]) was written in place after step() while the "
                                           "broadcast of its update from rank " + std::to_string(1 - rank)), e);
    CHECK_MESSAGE(ls::testing::contains(e, "call wait_for_broadcasts()"), e);
    CHECK(ls::testing::contains(ls::testing::error_of([&] { run.zero.wait_for_broadcasts(); }), "written in place"));
  }, 60s);
}
