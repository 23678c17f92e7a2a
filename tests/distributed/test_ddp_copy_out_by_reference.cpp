// tests/distributed/test_ddp_copy_out_by_reference.cpp — Note [Copy-out by reference]
// (distributed/ddp/reducer_grad_handover.cpp): without gradient_as_bucket_view, DDP hands
// an unshared .grad its bucket slot instead of copying into it. Training is bitwise the
// plain copy's (LOCKSTEP_DDP_COPY_OUT_BY_REFERENCE=0), with set_to_none or not, no_sync
// and the bucket rebuild; in a plain loop .grad ends each backward as the slot and the
// buckets keep their memory; a .grad (or a view of one) kept by the user keeps its values
// while the next backward goes to fresh bucket memory; a comm hook turns it off.
// Read before: distributed/ddp/reducer_grad_handover.cpp, tests/distributed/test_ddp_bucket_view.cpp.
#include <doctest/doctest.h>

#include <cstdlib>

#include "core/grad_mode.h"
#include "tests/distributed/ddp_beyond_util.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
namespace hooks = lockstep::distributed::comm_hooks;
using namespace std::chrono_literals;

namespace {

constexpr int64_t kPerRank = 4;

// TinyCNN trained for `steps` optimizer steps of `sync_every` micro-batches each;
// returns the final parameters and every step's averaged gradients.
std::pair<std::vector<ls::Tensor>, std::vector<ls::Tensor>> train(std::shared_ptr<dist::ProcessGroup> pg,
                                                                  bool by_reference, bool rebuild, int sync_every,
                                                                  bool set_to_none) {
  const int world = pg->size(), rank = pg->rank();
  const int steps = 3;
  auto [x, y] = ls::testing::image_data(steps * sync_every * world * kPerRank, 321);
  ls::manual_seed(0);
  auto model = std::make_shared<ls::testing::TinyCNN>();
  ls::testing::ByReference env(by_reference);
  dist::DistributedDataParallel ddp(
      model, pg, dist::DDPOptions().bucket_cap_mb(0.002).first_bucket_mb(0.001).rebuild_buckets(rebuild));
  ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
  std::vector<ls::Tensor> grads;
  for (int step = 0; step < steps * sync_every; ++step) {
    const int64_t chunk = step * world + rank;
    auto loss = [&] {
      return ls::cross_entropy(ddp.forward(ls::testing::chunk_rows(x, chunk, kPerRank)),
                               ls::testing::chunk_rows(y, chunk, kPerRank));
    };
    if ((step + 1) % sync_every == 0) {
      loss().backward();
      for (const ls::Tensor& g : ls::testing::grads_of(model->parameters())) grads.push_back(g.clone());
      opt.step();
      opt.zero_grad(set_to_none);
    } else {
      auto guard = ddp.no_sync();
      loss().backward();
    }
  }
  return {ls::testing::clone_all(model->parameters()), grads};
}

// Whether parameter i's .grad is its slot in its bucket.
template <class M>
bool grad_is_slot(const dist::DistributedDataParallel<M>& ddp, size_t i) {
  const auto& params = ddp.reducer().parameters();
  for (const dist::Bucket& b : ddp.reducer().buckets()) {
    for (size_t k = 0; k < b.param_indices.size(); ++k) {
      if (b.param_indices[k] != i) continue;
      const char* slot = static_cast<const char*>(b.flat.raw_data()) + b.offsets[k] * b.flat.element_size();
      return params[i].grad().defined() && params[i].grad().raw_data() == slot;
    }
  }
  return false;
}

// A TinyCNN in DDP (buckets of ~2 KB) with SGD, built with the switch `by_reference`,
// and one backward on random data drawn from `seed` and the rank.
struct Net {
  std::shared_ptr<ls::testing::TinyCNN> model;
  std::unique_ptr<dist::DistributedDataParallel<ls::testing::TinyCNN>> ddp;
  std::unique_ptr<ls::optim::SGD> opt;
  int rank;
  Net(std::shared_ptr<dist::ProcessGroup> pg, bool by_reference, dist::DDPOptions options = {}) : rank(pg->rank()) {
    ls::manual_seed(0);
    model = std::make_shared<ls::testing::TinyCNN>();
    ls::testing::ByReference env(by_reference);
    ddp = std::make_unique<dist::DistributedDataParallel<ls::testing::TinyCNN>>(model, pg, options.bucket_cap_mb(0.002));
    opt = std::make_unique<ls::optim::SGD>(model->parameters(), ls::optim::SGDOptions(0.1));
  }
  void backward(int seed) {
    ls::manual_seed(seed + rank);
    ls::cross_entropy(ddp->forward(ls::randn({3, 3, 8, 8})), ls::randint(0, 5, {3})).backward();
  }
  void step(bool set_to_none) {
    opt->step();
    opt->zero_grad(set_to_none);
  }
};

template <class M>
std::vector<const void*> bucket_memory(const dist::DistributedDataParallel<M>& ddp) {
  std::vector<const void*> where;
  for (const dist::Bucket& b : ddp.reducer().buckets()) where.push_back(b.flat.raw_data());
  return where;
}

}  // namespace

TEST_CASE("ddp copy-out by reference: training and gradients are bitwise the plain copy's") {
  ls::testing::run_ranks(2, [](int) {
    auto pg = dist::init_process_group("gloo");
    for (bool rebuild : {false, true}) {
      for (int sync_every : {1, 3}) {
        for (bool set_to_none : {true, false}) {
          CAPTURE(rebuild);
          CAPTURE(sync_every);
          CAPTURE(set_to_none);
          auto plain = train(pg, false, rebuild, sync_every, set_to_none);
          auto by_ref = train(pg, true, rebuild, sync_every, set_to_none);
          CHECK(ls::testing::all_equal(plain.first, by_ref.first));
          CHECK(ls::testing::all_equal(plain.second, by_ref.second));
          ls::testing::check_same_on_all_ranks(by_ref.first, *pg);
        }
      }
    }
  }, 180s);
}

TEST_CASE("ddp copy-out by reference: a plain loop hands the slots over and keeps the bucket memory") {
  ls::testing::run_ranks(2, [](int) {
    auto pg = dist::init_process_group("gloo");
    Net net(pg, true, dist::DDPOptions().rebuild_buckets(false));
    const std::vector<const void*> memory = bucket_memory(*net.ddp);
    for (int k = 0; k < 4; ++k) {
      CAPTURE(k);
      net.backward(90 + 2 * k);
      for (size_t i = 0; i < net.model->parameters().size(); ++i) CHECK(grad_is_slot(*net.ddp, i));
      CHECK(bucket_memory(*net.ddp) == memory);  // nobody else held a slot: no fresh memory
      net.step(/*set_to_none=*/k % 2 == 0);
    }
  }, 60s);
}

TEST_CASE("ddp copy-out by reference: a kept .grad or view keeps its values, the next backward gets fresh memory") {
  ls::testing::run_ranks(2, [](int) {
    auto pg = dist::init_process_group("gloo");
    Net net(pg, true, dist::DDPOptions().rebuild_buckets(false));
    net.backward(60);
    const std::vector<ls::Tensor> params = net.model->parameters();
    const ls::Tensor kept = params[0].grad();               // the .grad itself
    const ls::Tensor view = params[1].grad().reshape({-1});  // a view of another
    const ls::Tensor kept_values = kept.clone(), view_values = view.clone();
    const std::vector<const void*> memory = bucket_memory(*net.ddp);
    net.step(/*set_to_none=*/true);  // only the user's handles hold those slots now
    net.backward(62);
    CHECK(ls::equal(kept, kept_values));
    CHECK(ls::equal(view, view_values));
    CHECK(bucket_memory(*net.ddp) != memory);
    for (size_t i = 0; i < params.size(); ++i) CHECK(grad_is_slot(*net.ddp, i));
    ls::testing::check_same_on_all_ranks(ls::testing::grads_of(params), *pg);
  }, 60s);
}

TEST_CASE("ddp copy-out by reference: a user holding .grad across zero_grad(false) sees what the copy gives") {
  // zero_grad(false) zeroes .grad in place and backward accumulates into it: a handle to
  // .grad follows along in both modes and ends with the average.
  ls::testing::run_ranks(2, [](int) {
    auto pg = dist::init_process_group("gloo");
    std::vector<ls::Tensor> seen[2];
    for (bool by_reference : {false, true}) {
      Net net(pg, by_reference);
      net.backward(30);
      const ls::Tensor handle = net.model->parameters()[2].grad();
      net.step(/*set_to_none=*/false);
      net.backward(32);
      seen[by_reference].push_back(handle.clone());
      seen[by_reference].push_back(net.model->parameters()[2].grad().clone());
    }
    CHECK(ls::testing::all_equal(seen[0], seen[1]));
  }, 60s);
}

TEST_CASE("ddp copy-out by reference: off under a comm hook, where .grad stays a tensor of its own") {
  ls::testing::run_ranks(2, [](int) {
    auto pg = dist::init_process_group("gloo");
    Net net(pg, true);
    net.ddp->register_comm_hook(pg, hooks::allreduce_hook);
    net.backward(10);
    for (size_t i = 0; i < net.model->parameters().size(); ++i) CHECK_FALSE(grad_is_slot(*net.ddp, i));
  }, 60s);
}
