// tests/distributed/test_ddp_misuse.cpp — unused parameters (with and without
// find_unused_parameters), a parameter used on one rank only, a submodule also run
// outside ddp.forward, ranks with different models, the overlap of AllReduce with
// backward; and, through the
// per-iteration fingerprint (Note [DDP iteration fingerprint]), a rank that
// skips a backward and ranks with different bucket layouts; a rank that dies
// mid-backward, directly and through lockstep-run.
// Read before: distributed/ddp/reducer.h, distributed/ddp/ddp_fingerprint.h,
// tests/support/multiprocess.h.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "autograd/engine.h"
#include "distributed/distributed.h"
#include "optim/optim.h"
#include "tests/distributed/ddp_test_models.h"
#include "tests/support/errors.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;
using ls::testing::BranchyMLP;

namespace {
constexpr auto kTimeout = std::chrono::seconds(60);

using lockstep::testing::contains;
using lockstep::testing::error_of;

ls::Tensor batch_for(int rank) {
  ls::manual_seed(7 + rank);
  return ls::randn({4, 6});
}
}  // namespace

TEST_CASE("ddp: globally unused parameters keep an undefined grad and are skipped without a hang") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    ls::manual_seed(0);
    auto model = std::make_shared<BranchyMLP>();
    dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().find_unused_parameters(true));
    ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
    ls::Tensor side_before = model->side->weight.detach().clone();
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      ddp.forward(batch_for(rank), /*use_side=*/false).sum().backward();
      CHECK_FALSE(model->side->weight.grad().defined());
      CHECK(model->fc1->weight.grad().defined());
      opt.step();
    }
    CHECK(ls::equal(model->side->weight, side_before));
  }, kTimeout);
}

TEST_CASE("ddp: a parameter used on one rank only receives the average") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    ls::manual_seed(0);
    auto model = std::make_shared<BranchyMLP>();
    // The local gradient of `side` on rank 0, computed on a copy before DDP runs.
    ls::Tensor g0;
    {
      ls::manual_seed(0);
      auto copy = std::make_shared<BranchyMLP>();
      copy->forward(batch_for(0), true).sum().backward();
      g0 = copy->side->weight.grad().detach().clone();
    }
    dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().find_unused_parameters(true));
    ddp.forward(batch_for(rank), /*use_side=*/rank == 0).sum().backward();
    REQUIRE(model->side->weight.grad().defined());
    CHECK(ls::allclose(model->side->weight.grad(), g0 * 0.5, 1e-5, 1e-6));
  }, kTimeout);
}

TEST_CASE("ddp: an unused parameter without find_unused_parameters names it at the next forward") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    ls::manual_seed(0);
    auto model = std::make_shared<BranchyMLP>();
    dist::DistributedDataParallel ddp(model, pg);
    ddp.forward(batch_for(rank), false).sum().backward();  // side gets no gradient
    try {
      ddp.forward(batch_for(rank), false);
      FAIL("the second forward should have thrown");
    } catch (const ls::Error& e) {
      std::string msg = e.what();
      CHECK(msg.find("side.weight") != std::string::npos);
      CHECK(msg.find("find_unused_parameters") != std::string::npos);
    }
  }, kTimeout);
}

// A submodule also run outside ddp.forward: with find_unused_parameters, DDP marks the
// parameters its forward did not reach ready at once, and the outside use then gives them a
// second gradient. The error names that mistake first (it used to blame activation
// checkpointing, which the program does not use). Every rank does it here so that no rank
// waits on a bucket the other never launches; the message is each rank's own.
TEST_CASE("ddp: a submodule also used outside ddp.forward is named as the cause of a second gradient") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    ls::manual_seed(0);
    auto model = std::make_shared<BranchyMLP>();
    dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().find_unused_parameters(true));
    const ls::Tensor h = ls::randn({4, 8});  // (4, 8): an input for `side`, outside ddp.forward
    ls::Tensor loss = ddp.forward(batch_for(rank), /*use_side=*/false).sum() + model->side->forward(h).sum();
    const std::string message = error_of([&] { loss.backward(); });
    CHECK_MESSAGE(contains(message, "parameter 'side."), message);
    CHECK_MESSAGE(contains(message, "received a gradient twice"), message);
    CHECK_MESSAGE(contains(message, "also used outside ddp.forward in this iteration"), message);
  }, kTimeout);
}

TEST_CASE("ddp: ranks with different models fail at construction naming the difference") {
  auto results = ls::testing::launch_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    std::shared_ptr<ls::nn::Module> model;
    if (rank == 0) {
      model = std::make_shared<BranchyMLP>();
    } else {
      model = std::make_shared<ls::testing::TinyCNN>();
    }
    dist::DistributedDataParallel ddp(model, pg);
  }, kTimeout);
  for (const auto& r : results) {
    CHECK_FALSE(r.ok());
    CHECK(r.message.find("rank") != std::string::npos);
    CHECK_FALSE(r.timed_out);
  }
  CHECK(results[1].message.find("rank 0") != std::string::npos);
}

namespace {
// Wraps a process group and records, for each allreduce, how many parameters'
// gradients had been accumulated when it was issued (`*hooks_fired`, counted by
// the test's own post-accumulate-grad hooks).
class RecordingGroup : public dist::ProcessGroup {
 public:
  RecordingGroup(std::shared_ptr<dist::ProcessGroup> inner, const int* hooks_fired)
      : ProcessGroup(inner->rank(), inner->size()), inner_(std::move(inner)), hooks_fired_(hooks_fired) {}
  std::string backend_name() const override { return "recording"; }
  std::shared_ptr<dist::Work> allreduce(ls::Tensor& t, dist::ReduceOp op) override {
    grads_ready_at_launch.push_back(*hooks_fired_);
    return inner_->allreduce(t, op);
  }
  std::shared_ptr<dist::Work> broadcast(ls::Tensor& t, int root) override { return inner_->broadcast(t, root); }
  std::shared_ptr<dist::Work> allgather(std::vector<ls::Tensor>& o, const ls::Tensor& i) override {
    return inner_->allgather(o, i);
  }
  std::shared_ptr<dist::Work> reduce_scatter(ls::Tensor& o, std::vector<ls::Tensor>& i, dist::ReduceOp op) override {
    return inner_->reduce_scatter(o, i, op);
  }
  std::shared_ptr<dist::Work> barrier() override { return inner_->barrier(); }
  std::shared_ptr<dist::Work> send(const ls::Tensor& t, int dst, int tag) override { return inner_->send(t, dst, tag); }
  std::shared_ptr<dist::Work> recv(ls::Tensor& t, int src, int tag) override { return inner_->recv(t, src, tag); }
  std::vector<int> grads_ready_at_launch;

 private:
  std::shared_ptr<dist::ProcessGroup> inner_;
  const int* hooks_fired_;
};
}  // namespace

TEST_CASE("ddp: buckets are launched while backward is still running (overlap), or after it without") {
  ls::testing::run_ranks(2, [](int rank) {
    auto inner = dist::init_process_group("gloo");
    for (bool overlap : {true, false}) {
      int hooks_fired = 0;
      auto pg = std::make_shared<RecordingGroup>(inner, &hooks_fired);
      ls::manual_seed(0);
      auto model = std::make_shared<ls::testing::TinyCNN>();
      dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().bucket_cap_mb(0).overlap(overlap));
      std::vector<ls::autograd::HookHandle> counters;
      for (auto& p : model->parameters()) {
        counters.push_back(p.register_post_accumulate_grad_hook([&](ls::Tensor&) { ++hooks_fired; }));
      }
      ls::manual_seed(rank);
      ddp.forward(ls::randn({2, 3, 8, 8})).sum().backward();
      const int num_params = static_cast<int>(model->parameters().size());
      REQUIRE(hooks_fired == num_params);
      REQUIRE(pg->grads_ready_at_launch.size() == ddp.reducer().num_buckets());
      if (overlap) {
        // The first bucket (the last layer's gradients) travels while the
        // earlier layers' gradients are still being computed.
        CHECK(pg->grads_ready_at_launch.front() < num_params - 1);
      } else {
        // The paper's no-overlap baseline: nothing starts before backward is done.
        CHECK(pg->grads_ready_at_launch.front() == num_params);
      }
      for (auto& h : counters) h.remove();
    }
  }, kTimeout);
}

// ---- Ranks out of step: the per-iteration fingerprint -------------------------

namespace {

// Where a training loop stopped: the step whose forward or backward threw, and the message.
struct Stop {
  int step = -1;
  std::string message;
};

// Runs `steps` SGD steps of `forward_loss` through `ddp`; the rank `skipper`
// skips the backward (and the optimizer step) of step `skip_at` — the bug under
// test. Stops at the first ls::Error.
template <class M, class Loss>
Stop train(dist::DistributedDataParallel<M>& ddp, int rank, int skipper, int skip_at, int steps, Loss forward_loss) {
  ls::optim::SGD opt(ddp.module()->parameters(), ls::optim::SGDOptions(0.05));
  for (int step = 0; step < steps; ++step) {
    try {
      opt.zero_grad();
      ls::Tensor loss = forward_loss(step);
      if (rank == skipper && step == skip_at) continue;
      loss.backward();
      opt.step();
    } catch (const ls::Error& e) {
      return {step, e.what()};
    }
  }
  return {};
}

}  // namespace

TEST_CASE("ddp: a rank that skips a backward stops every rank within one iteration (model with buffers)") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s));
    ls::manual_seed(0);
    auto model = std::make_shared<ls::testing::TinyCNN>();  // BatchNorm: forwards broadcast buffers
    dist::DistributedDataParallel ddp(model, pg);
    Stop stop = train(ddp, rank, /*skipper=*/1, /*skip_at=*/2, 6, [&](int step) {
      ls::manual_seed(100 + 2 * step + rank);
      return ddp.forward(ls::randn({2, 3, 8, 8})).sum();
    });
    // Rank 0 stops in the backward of step 2; rank 1, which skipped it, in the
    // forward of step 3 — before either moves a gradient bucket.
    CHECK(stop.step == (rank == 0 ? 2 : 3));
    const std::string& msg = stop.message;
    CHECK_MESSAGE(contains(msg, "DDP (rank " + std::to_string(rank) + "): the ranks disagree"), msg);
    CHECK_MESSAGE(contains(msg, "rank 0: in backward #3, after 3 synced forward(s)"), msg);
    CHECK_MESSAGE(contains(msg, "rank 1: starting forward #4, after 2 synced backward(s)"), msg);
    CHECK_MESSAGE(contains(msg, "Likely cause: rank 1 ran 1 more synced forward(s) whose backward never ran "
                                "than rank 0 — a rank skipped a backward"), msg);
    // DDP refuses to go on, repeating the cause, instead of reducing mismatched gradients.
    std::string again = error_of([&] { ddp.forward(ls::randn({2, 3, 8, 8})); });
    CHECK_MESSAGE(contains(again, "cannot continue after an earlier error"), again);
    CHECK_MESSAGE(contains(again, "skipped a backward"), again);
  }, kTimeout);
}

TEST_CASE("ddp: a rank that skips a backward stops every rank within one iteration (3 ranks without buffers)") {
  ls::testing::run_ranks(3, [](int rank) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s));
    // Without and with find_unused_parameters (whose forward AllReduces a bitmap).
    // The first failure leaves every rank with the same number of collectives
    // issued, so the group serves the second DDP.
    for (bool find_unused : {false, true}) {
      CAPTURE(find_unused);
      ls::manual_seed(0);
      auto model = std::make_shared<BranchyMLP>();
      dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().find_unused_parameters(find_unused));
      Stop stop = train(ddp, rank, /*skipper=*/2, /*skip_at=*/1, 5, [&](int step) {
        ls::manual_seed(200 + 3 * step + rank);
        return ddp.forward(ls::randn({4, 6}), /*use_side=*/true).sum();
      });
      CHECK(stop.step == (rank == 2 ? 2 : 1));
      const std::string& msg = stop.message;
      CHECK_MESSAGE(contains(msg, "ranks 0, 1: in backward #2, after 2 synced forward(s)"), msg);
      CHECK_MESSAGE(contains(msg, find_unused ? "rank 2: starting forward #3, after 1 synced backward(s)"
                                              : "rank 2: in backward #2, after 3 synced forward(s)"), msg);
      CHECK_MESSAGE(contains(msg, "Likely cause: rank 2 ran 1 more synced forward(s) whose backward never ran "
                                  "than ranks 0, 1"), msg);
    }
  }, kTimeout);
}

TEST_CASE("ddp: ranks with different bucket layouts stop at the first synced forward naming both layouts") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s));
    ls::manual_seed(0);
    auto model = std::make_shared<ls::testing::TinyCNN>();
    // Same model, but rank 1 asks for one bucket per parameter.
    dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().bucket_cap_mb(rank == 1 ? 0 : 25));
    const int64_t buckets = static_cast<int64_t>(ddp.reducer().num_buckets());
    REQUIRE(buckets == (rank == 1 ? static_cast<int64_t>(model->parameters().size()) : 1));
    std::string msg = error_of([&] { ddp.forward(ls::randn({2, 3, 8, 8})).sum().backward(); });
    CHECK_MESSAGE(contains(msg, "The gradient bucket layouts differ: rank 0: 1 bucket(s)"), msg);
    CHECK_MESSAGE(contains(msg, "rank 1: " + std::to_string(model->parameters().size()) + " bucket(s)"), msg);
    CHECK_MESSAGE(contains(msg, "bucket_cap_mb"), msg);
    CHECK_MESSAGE(!contains(msg, "Likely cause: rank"), msg);  // both are at the same point
  }, kTimeout);
}

// ---- A rank that dies ------------------------------------------------------------

namespace {

// Trains TinyCNN with one bucket per parameter; at step `die_at` rank 1 kills
// itself from a gradient hook in the middle of backward, after some buckets have
// been launched. Returns where rank 0 (or any survivor) stopped.
Stop train_until_a_peer_dies(int rank, int die_at) {
  auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(10s));
  ls::manual_seed(0);
  auto model = std::make_shared<ls::testing::TinyCNN>();
  dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().bucket_cap_mb(0));
  int step_now = 0;
  ls::autograd::HookHandle killer = model->conv2->weight.register_post_accumulate_grad_hook([&](ls::Tensor&) {
    if (rank == 1 && step_now == die_at) raise(SIGKILL);
  });
  Stop stop = train(ddp, rank, /*skipper=*/-1, -1, die_at + 3, [&](int step) {
    step_now = step;
    ls::manual_seed(300 + 2 * step + rank);
    return ddp.forward(ls::randn({2, 3, 8, 8})).sum();
  });
  killer.remove();
  return stop;
}

}  // namespace

TEST_CASE("ddp: a rank that dies mid-backward makes the others fail with a clear error and no hang") {
  auto results = ls::testing::launch_ranks(2, [](int rank) {
    Stop stop = train_until_a_peer_dies(rank, /*die_at=*/2);
    CHECK(stop.step == 2);
    CHECK_MESSAGE(contains(stop.message, "DDP (rank 0): backward #3: "), stop.message);
    CHECK_MESSAGE(contains(stop.message, "A peer rank has probably died"), stop.message);
  }, kTimeout);
  CHECK(results[1].signal == SIGKILL);
  CHECK_MESSAGE(results[0].ok(), results[0].describe());  // it saw the error and checked it in time
}

// Run by the test case below under lockstep-run (CTest does not list it).
TEST_CASE("ddp worker: rank 1 dies mid-training" * doctest::skip()) {
  REQUIRE_MESSAGE(std::getenv("RANK") != nullptr, "run this test case under lockstep-run");
  const int rank = std::atoi(std::getenv("RANK"));
  Stop stop = train_until_a_peer_dies(rank, /*die_at=*/2);
  std::printf("ddp worker: rank %d stopped at step %d: %s\n", rank, stop.step, stop.message.c_str());
  std::fflush(stdout);
}

TEST_CASE("ddp: through lockstep-run a rank that dies is named with its signal and the job ends") {
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
  const std::filesystem::path launcher = self.parent_path() / "lockstep-run";
  REQUIRE_MESSAGE(std::filesystem::exists(launcher), "build the lockstep-run target first: " << launcher);
  const std::string command = "timeout -s KILL 60 " + launcher.string() + " --nproc-per-node 2 --master-port " +
                              std::to_string(ls::testing::free_port()) + " -- " + self.string() +
                              " --no-skip --test-case='ddp worker: *' 2>&1";
  std::string output;
  FILE* p = ::popen(command.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof(buf), p)) output.append(buf, n);
  const int status = ::pclose(p);
  INFO(command << "\n" << output);
  REQUIRE(WIFEXITED(status));  // not killed by the 60 s bound
  CHECK(WEXITSTATUS(status) == 128 + SIGKILL);
  CHECK(contains(output, "lockstep-run: rank 1 failed first (signal SIGKILL); stopped the other ranks"));
}
