// tests/distributed/test_ddp_misuse.cpp — unused parameters (with and without
// find_unused_parameters), a parameter used on one rank only, ranks with
// different models, and the overlap of AllReduce with backward.
#include <doctest/doctest.h>

#include "autograd/engine.h"
#include "distributed/distributed.h"
#include "optim/optim.h"
#include "tests/distributed/ddp_test_models.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using ls::testing::BranchyMLP;

namespace {
constexpr auto kTimeout = std::chrono::seconds(60);

ls::Tensor batch_for(int rank) {
  ls::manual_seed(7 + rank);
  return ls::randn({4, 6});
}
}  // namespace

TEST_CASE("ddp: globally unused parameters keep an undefined grad and are skipped; no hang") {
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
