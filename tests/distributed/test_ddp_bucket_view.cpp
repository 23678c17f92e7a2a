// tests/distributed/test_ddp_bucket_view.cpp — DDPOptions().gradient_as_bucket_view(true)
// (Note [Gradients as bucket views], distributed/ddp/reducer_buckets.cpp): training is
// bitwise the copy mode's (which test_ddp.cpp proves equal to local training),
// with and without no_sync; .grad points into the bucket buffers, zero_grad(false)
// keeps the views and set_to_none's dropped views come back at the next backward,
// also after the bucket rebuild; with find_unused_parameters a globally unused
// parameter keeps its .grad untouched and a parameter used on one rank only
// receives the average.
// Read before: distributed/ddp/reducer_buckets.cpp, tests/distributed/ddp_beyond_util.h.
#include <doctest/doctest.h>

#include "core/grad_mode.h"
#include "tests/distributed/ddp_beyond_util.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;

namespace {

constexpr int64_t kPerRank = 4;

// TinyCNN trained for `steps` optimizer steps of `sync_every` micro-batches
// each (all but the last under no_sync); returns the final parameters.
std::vector<ls::Tensor> train_cnn(std::shared_ptr<dist::ProcessGroup> pg, dist::DDPOptions options, int steps,
                                  int sync_every, bool set_to_none) {
  const int world = pg->size(), rank = pg->rank();
  auto [x, y] = ls::testing::image_data(steps * sync_every * world * kPerRank, 123);
  ls::manual_seed(0);
  auto model = std::make_shared<ls::testing::TinyCNN>();
  dist::DistributedDataParallel ddp(model, pg, options);
  ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < steps * sync_every; ++step) {
    const int64_t chunk = step * world + rank;
    auto loss = [&] {
      return ls::cross_entropy(ddp.forward(ls::testing::chunk_rows(x, chunk, kPerRank)),
                               ls::testing::chunk_rows(y, chunk, kPerRank));
    };
    if ((step + 1) % sync_every == 0) {
      loss().backward();
      opt.step();
      opt.zero_grad(set_to_none);
    } else {
      auto guard = ddp.no_sync();
      loss().backward();
    }
  }
  return ls::testing::clone_all(model->parameters());
}

// Every parameter's .grad is its slice of its bucket's flat buffer.
template <class M>
bool grads_are_bucket_views(const dist::DistributedDataParallel<M>& ddp) {
  const auto& params = ddp.reducer().parameters();
  for (const dist::Bucket& b : ddp.reducer().buckets()) {
    for (size_t k = 0; k < b.param_indices.size(); ++k) {
      const ls::Tensor& g = params[b.param_indices[k]].grad();
      const char* slot = static_cast<const char*>(b.flat.raw_data()) + b.offsets[k] * b.flat.element_size();
      if (!g.defined() || g.raw_data() != slot || g.sizes() != params[b.param_indices[k]].sizes()) return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("ddp bucket view: training is bitwise the copy mode's, with and without no_sync") {
  ls::testing::run_ranks(2, [](int) {
    auto pg = dist::init_process_group("gloo");
    for (int sync_every : {1, 3}) {
      CAPTURE(sync_every);
      const auto options = dist::DDPOptions().bucket_cap_mb(0.002).first_bucket_mb(0.001);
      auto copied = train_cnn(pg, options, 3, sync_every, /*set_to_none=*/true);
      auto viewed = train_cnn(pg, dist::DDPOptions(options).gradient_as_bucket_view(true), 3, sync_every, true);
      auto viewed_kept = train_cnn(pg, dist::DDPOptions(options).gradient_as_bucket_view(true), 3, sync_every, false);
      CHECK(ls::testing::all_equal(copied, viewed));
      CHECK(ls::testing::all_equal(copied, viewed_kept));
      ls::testing::check_same_on_all_ranks(viewed, *pg);
    }
  }, 120s);
}

TEST_CASE("ddp bucket view: grads point into the buckets, zero_grad(false) keeps them, set_to_none's come back") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    for (bool rebuild : {false, true}) {
      CAPTURE(rebuild);
      ls::manual_seed(0);
      auto model = std::make_shared<ls::testing::TinyCNN>();
      dist::DistributedDataParallel ddp(
          model, pg, dist::DDPOptions().bucket_cap_mb(0.002).gradient_as_bucket_view(true).rebuild_buckets(rebuild));
      ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1));
      auto step = [&](int k) {
        ls::manual_seed(40 + 2 * k + rank);
        ls::cross_entropy(ddp.forward(ls::randn({3, 3, 8, 8})), ls::randint(0, 5, {3})).backward();
      };
      step(0);
      CHECK(grads_are_bucket_views(ddp));
      std::vector<const void*> where;
      for (auto& p : model->parameters()) where.push_back(p.grad().raw_data());
      opt.step();
      opt.zero_grad(/*set_to_none=*/false);  // zeroes the bucket slots in place
      CHECK(grads_are_bucket_views(ddp));
      for (auto& p : model->parameters()) CHECK(ls::equal(p.grad(), ls::zeros_like(p)));
      step(1);  // with rebuild: the buckets are rebuilt in this forward, the views move
      CHECK(ddp.reducer().has_rebuilt_buckets() == rebuild);
      CHECK(grads_are_bucket_views(ddp));
      std::vector<const void*> now;
      for (auto& p : model->parameters()) now.push_back(p.grad().raw_data());
      CHECK((now == where) == !rebuild);
      opt.step();
      opt.zero_grad();  // set_to_none: the views are gone ...
      for (auto& p : model->parameters()) CHECK_FALSE(p.grad().defined());
      step(2);  // ... and the next backward re-establishes them
      CHECK(grads_are_bucket_views(ddp));
      ls::testing::check_same_on_all_ranks(ls::testing::grads_of(model->parameters()), *pg);
    }
  }, 60s);
}

TEST_CASE("ddp bucket view: with find_unused_parameters unused grads stay untouched and partial use is averaged") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    // The same three iterations, copy mode then view mode; grads compared after each.
    std::vector<std::vector<ls::Tensor>> grads[2];
    for (bool view : {false, true}) {
      ls::manual_seed(0);
      auto model = std::make_shared<ls::testing::BranchyMLP>();
      dist::DistributedDataParallel ddp(
          model, pg, dist::DDPOptions().find_unused_parameters(true).gradient_as_bucket_view(view));
      auto backward = [&](int k, bool use_side) {
        ls::manual_seed(70 + 2 * k + rank);
        ddp.forward(ls::randn({4, 6}), use_side).sum().backward();
        grads[view].push_back(ls::testing::grads_of(model->parameters()));
      };
      backward(0, /*use_side=*/true);
      // Make the ranks' side grads differ (in place: with view mode they stay views).
      {
        ls::NoGradGuard no_grad;
        model->side->weight.mutable_grad().mul_(rank + 1.0);
      }
      const ls::Tensor side_before = model->side->weight.grad().detach().clone();
      backward(1, /*use_side=*/false);  // side unused on every rank: its .grad must not change
      CHECK(ls::equal(model->side->weight.grad(), side_before));
      model->zero_grad();
      backward(2, /*use_side=*/rank == 0);  // side used on rank 0 only: both get the average
      CHECK(model->side->weight.grad().defined());
    }
    REQUIRE(grads[0].size() == grads[1].size());
    for (size_t k = 0; k < grads[0].size(); ++k) {
      CAPTURE(k);
      for (size_t i = 0; i < grads[0][k].size(); ++i) {
        CHECK(grads[0][k][i].defined() == grads[1][k][i].defined());
        if (grads[0][k][i].defined() && grads[1][k][i].defined()) CHECK(ls::equal(grads[0][k][i], grads[1][k][i]));
      }
    }
  }, 60s);
}
