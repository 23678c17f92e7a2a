// tests/distributed/test_ddp_rebuild.cpp — bucket rebuild from the traced order
// (Note [Bucket rebuild from the traced order], distributed/ddp/reducer_rebuild.cpp):
// the pure assignment with an explicit order; a model registered in the reverse
// of its execution order gets buckets in execution order after iteration 1, so
// the first AllReduce starts at the first gradient instead of the last, and
// training still equals local training; ranks that observe different orders all
// adopt rank 0's; find_unused_parameters puts unused parameters last;
// rebuild_buckets(false) keeps the initial buckets.
// Read before: distributed/ddp/reducer_rebuild.cpp, tests/distributed/ddp_beyond_util.h.
#include <doctest/doctest.h>

#include "core/factory.h"
#include "distributed/ddp/bucket_assignment.h"
#include "tests/distributed/ddp_beyond_util.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;

namespace {

constexpr int64_t kPerRank = 4;

// The order in which `params`' post-accumulate-grad hooks fire (registered
// after DDP's, so they see the same order); also counts them in `*fired`.
struct OrderRecorder {
  std::vector<size_t> order;
  std::vector<ls::autograd::HookHandle> handles;
  explicit OrderRecorder(const std::vector<ls::Tensor>& params, int* fired = nullptr) {
    for (size_t i = 0; i < params.size(); ++i) {
      handles.push_back(params[i].register_post_accumulate_grad_hook([this, i, fired](ls::Tensor&) {
        order.push_back(i);
        if (fired != nullptr) ++*fired;
      }));
    }
  }
  ~OrderRecorder() {
    for (auto& h : handles) h.remove();
  }
};

// The parameter of each bucket, in launch order (bucket_cap_mb 0: one each).
std::vector<size_t> bucket_order(const dist::Reducer& reducer) {
  std::vector<size_t> out;
  for (const auto& b : reducer.buckets()) out.insert(out.end(), b.param_indices.begin(), b.param_indices.end());
  return out;
}

// Two branches whose execution order forward decides; registered a, b, head.
struct TwoBranch : ls::nn::Module {
  std::shared_ptr<ls::nn::Linear> a, b, head;
  TwoBranch() {
    a = register_module("a", std::make_shared<ls::nn::Linear>(6, 8));
    b = register_module("b", std::make_shared<ls::nn::Linear>(6, 8));
    head = register_module("head", std::make_shared<ls::nn::Linear>(8, 3));
  }
  ls::Tensor forward(const ls::Tensor& x, bool a_first) {
    ls::Tensor ha, hb;
    if (a_first) {
      ha = a->forward(x).relu();
      hb = b->forward(x).tanh();
    } else {
      hb = b->forward(x).tanh();
      ha = a->forward(x).relu();
    }
    return head->forward(ha + hb);  // (B, 3)
  }
};

// Registered head, side, stem; executed stem, (side), head.
struct ReorderedBranchy : ls::nn::Module {
  std::shared_ptr<ls::nn::Linear> head, side, stem;
  ReorderedBranchy() {
    head = register_module("head", std::make_shared<ls::nn::Linear>(8, 3));
    side = register_module("side", std::make_shared<ls::nn::Linear>(8, 8));
    stem = register_module("stem", std::make_shared<ls::nn::Linear>(6, 8));
  }
  ls::Tensor forward(const ls::Tensor& x, bool use_side) {
    ls::Tensor h = stem->forward(x).relu();
    if (use_side) h = h + side->forward(h).tanh();
    return head->forward(h);
  }
};

}  // namespace

TEST_CASE("bucket assignment: an explicit ready order sets bucket contents and launch order") {
  std::vector<ls::Tensor> params;
  for (int i = 0; i < 4; ++i) params.push_back(ls::zeros({128 * 1024}));  // 512 KiB each
  auto buckets = dist::compute_bucket_assignment(params, {1, 3, 0, 2}, /*first_bucket_mb=*/1, /*cap=*/2);
  REQUIRE(buckets.size() == 2);
  CHECK(buckets[0].param_indices == std::vector<size_t>{1, 3});
  CHECK(buckets[1].param_indices == std::vector<size_t>{0, 2});
  auto single = dist::compute_bucket_assignment(params, {2, 0, 3, 1}, 1, 0);
  REQUIRE(single.size() == 4);
  for (size_t k = 0; k < 4; ++k) CHECK(single[k].param_indices.front() == std::vector<size_t>{2, 0, 3, 1}[k]);
  CHECK_THROWS_AS(dist::compute_bucket_assignment(params, {0, 0, 1, 2}, 1, 2), ls::Error);
  CHECK_THROWS_AS(dist::compute_bucket_assignment(params, {0, 1, 2}, 1, 2), ls::Error);
}

TEST_CASE("ddp rebuild: a model registered out of execution order gets buckets in execution order") {
  ls::testing::run_ranks(2, [](int rank) {
    auto inner = dist::init_process_group("gloo");
    constexpr int kSteps = 4, world = 2;
    ls::manual_seed(9);
    ls::Tensor x = ls::randn({kSteps * world * kPerRank, 6}), y = ls::randint(0, 3, {kSteps * world * kPerRank});
    int hooks_fired = 0;
    auto pg = std::make_shared<ls::testing::LaunchRecordingGroup>(inner, &hooks_fired);
    ls::manual_seed(0);
    auto model = std::make_shared<ls::testing::ReorderedMLP>();
    dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().bucket_cap_mb(0));
    ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
    const size_t n = model->parameters().size();
    // Initial guess: reverse registration, i.e. fc1 (used first, so ready last) first.
    CHECK(bucket_order(ddp.reducer()) == std::vector<size_t>{5, 4, 3, 2, 1, 0});
    OrderRecorder recorder(model->parameters(), &hooks_fired);
    std::vector<size_t> traced;
    for (int step = 0; step < kSteps; ++step) {
      hooks_fired = 0;
      pg->grads_ready_at_launch.clear();
      const int64_t chunk = step * world + rank;
      ls::Tensor out = ddp.forward(ls::testing::chunk_rows(x, chunk, kPerRank));
      CHECK(ddp.reducer().has_rebuilt_buckets() == (step >= 1));
      if (step == 1) CHECK(bucket_order(ddp.reducer()) == traced);  // rebuilt in execution order
      recorder.order.clear();
      ls::cross_entropy(out, ls::testing::chunk_rows(y, chunk, kPerRank)).backward();
      if (step == 0) traced = recorder.order;
      REQUIRE(pg->grads_ready_at_launch.size() == n);
      if (step == 0) {
        // Bucket 0 waits for fc1's gradient, computed last: nothing overlaps.
        CHECK(pg->grads_ready_at_launch.front() >= static_cast<int>(n) - 2);
      } else {
        // Bucket 0 now holds the first gradient ready: it travels at once.
        CHECK(pg->grads_ready_at_launch.front() == 0);
      }
      opt.step();
      opt.zero_grad();
    }
    REQUIRE(traced.size() == n);
    CHECK((traced.front() == 0 || traced.front() == 1));  // fc3's weight or bias first
    ls::testing::check_same_on_all_ranks(model->parameters(), *inner);
    // Local training on the same chunks.
    ls::manual_seed(0);
    auto local = std::make_shared<ls::testing::ReorderedMLP>();
    ls::optim::SGD local_opt(local->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < kSteps; ++step) {
      for (int r = 0; r < world; ++r) {
        const int64_t chunk = step * world + r;
        (ls::cross_entropy(local->forward(ls::testing::chunk_rows(x, chunk, kPerRank)),
                           ls::testing::chunk_rows(y, chunk, kPerRank)) / static_cast<double>(world)).backward();
      }
      local_opt.step();
      local_opt.zero_grad();
    }
    const double diff = ls::testing::max_abs_diff(model->parameters(), local->parameters());
    CHECK_MESSAGE(diff < 2e-5, "max |ddp - local| = " << diff);

    // rebuild_buckets(false): the initial buckets stay.
    ls::manual_seed(0);
    auto fixed_model = std::make_shared<ls::testing::ReorderedMLP>();
    dist::DistributedDataParallel fixed(fixed_model, inner, dist::DDPOptions().bucket_cap_mb(0).rebuild_buckets(false));
    for (int step = 0; step < 2; ++step) fixed.forward(ls::testing::chunk_rows(x, rank, kPerRank)).sum().backward();
    CHECK_FALSE(fixed.reducer().has_rebuilt_buckets());
    CHECK(bucket_order(fixed.reducer()) == std::vector<size_t>{5, 4, 3, 2, 1, 0});
  }, 60s);
}

TEST_CASE("ddp rebuild: ranks that observe different orders all adopt rank 0's") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    ls::manual_seed(0);
    auto model = std::make_shared<TwoBranch>();
    dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().bucket_cap_mb(0));
    OrderRecorder recorder(model->parameters());
    const bool a_first = rank == 0;  // rank 1 runs the branches the other way round
    ls::manual_seed(20 + rank);
    ddp.forward(ls::randn({4, 6}), a_first).sum().backward();
    std::vector<int64_t> mine(recorder.order.begin(), recorder.order.end());
    std::vector<ls::Tensor> orders;
    pg->allgather(orders, ls::tensor(mine))->wait();
    const auto rank0 = orders[0].to_vector<int64_t>();
    REQUIRE_MESSAGE(rank0 != orders[1].to_vector<int64_t>(), "the ranks must observe different orders");
    ls::manual_seed(30 + rank);
    ddp.forward(ls::randn({4, 6}), a_first).sum().backward();  // rebuilt in this forward
    REQUIRE(ddp.reducer().has_rebuilt_buckets());
    const auto buckets = bucket_order(ddp.reducer());
    CHECK(std::vector<int64_t>(buckets.begin(), buckets.end()) == rank0);
    ls::testing::check_same_on_all_ranks(ls::testing::grads_of(model->parameters()), *pg);
  }, 60s);
}

TEST_CASE("ddp rebuild: with find_unused_parameters unused parameters go last and training matches local") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    constexpr int kSteps = 4, world = 2;
    // side is unused on both ranks at step 0 (the traced one), then on one rank or on none.
    auto use_side = [](int step, int r) { return (step + r + 1) % 3 == 0; };
    ls::manual_seed(11);
    ls::Tensor x = ls::randn({kSteps * world * kPerRank, 6});
    ls::manual_seed(0);
    auto model = std::make_shared<ReorderedBranchy>();
    dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().bucket_cap_mb(0).find_unused_parameters(true));
    ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < kSteps; ++step) {
      const int64_t chunk = step * world + rank;
      ddp.forward(ls::testing::chunk_rows(x, chunk, kPerRank), use_side(step, rank)).pow(2.0).mean().backward();
      opt.step();
      opt.zero_grad();
    }
    REQUIRE(ddp.reducer().has_rebuilt_buckets());
    // Parameters: head.weight 0, head.bias 1, side.weight 2, side.bias 3, stem.weight 4, stem.bias 5.
    const auto order = bucket_order(ddp.reducer());
    REQUIRE(order.size() == 6);
    CHECK(order[0] <= 1);  // head first (ready first)
    CHECK(order[2] >= 4);  // then stem
    CHECK(order[3] >= 4);
    CHECK(order[4] == 3);  // side, unused in the traced iteration: last, in reverse registration order
    CHECK(order[5] == 2);
    ls::testing::check_same_on_all_ranks(model->parameters(), *pg);
    ls::manual_seed(0);
    auto local = std::make_shared<ReorderedBranchy>();
    ls::optim::SGD local_opt(local->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < kSteps; ++step) {
      for (int r = 0; r < world; ++r) {
        const int64_t chunk = step * world + r;
        (local->forward(ls::testing::chunk_rows(x, chunk, kPerRank), use_side(step, r)).pow(2.0).mean() /
         static_cast<double>(world)).backward();
      }
      local_opt.step();
      local_opt.zero_grad();
    }
    const double diff = ls::testing::max_abs_diff(model->parameters(), local->parameters());
    CHECK_MESSAGE(diff < 2e-5, "max |ddp - local| = " << diff);
  }, 60s);
}
