// tests/distributed/test_zero_state_dict.cpp — ZeroRedundancyOptimizer's state
// dicts (Note [ZeRO state dicts]): consolidated at 2 ranks it is a plain
// AdamW's state dict; saved at 2 ranks it loads at 1 and 4 (whole, or all the
// shards), round-trips bitwise and training continues as at 2 ranks; a shard
// alone loads only into its own rank and world size. Misuse errors: stepping
// before backward, overlap without the hook or without a synced backward,
// a forgotten step(), parameters not in the DDP module, clipping or join()
// with overlap, state_dict() without consolidation, different parameters on
// different ranks.
// Read before: tests/distributed/test_zero.cpp.
#include <doctest/doctest.h>

#include "nn/serialize.h"
#include "tests/distributed/zero_test_util.h"
#include "tests/support/multiprocess.h"
#include "tests/support/temp_files.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;

namespace {

constexpr int64_t kGlobalBatch = 8;

// `steps` AdamW steps (ReorderedMLP: no BatchNorm, so the averaged gradient
// does not depend on how the global batch is split) of the global batch starting at step `first`, split over the ranks.
void train_steps(dist::DistributedDataParallel<ls::testing::ReorderedMLP>& ddp, ls::optim::Optimizer& opt,
                 const std::shared_ptr<dist::ProcessGroup>& pg, int first, int steps) {
  ls::manual_seed(777);  // the same data at every world size
  const ls::Tensor x = ls::randn({4 * kGlobalBatch, 6}), y = ls::randint(0, 3, {4 * kGlobalBatch});
  const int64_t per = kGlobalBatch / pg->size();
  for (int s = first; s < first + steps; ++s) {
    const int64_t chunk = s * pg->size() + pg->rank();
    ls::cross_entropy(ddp.forward(ls::testing::chunk_rows(x, chunk, per)),
                      ls::testing::chunk_rows(y, chunk, per)).backward();
    opt.step();
    opt.zero_grad();
  }
}

bool same_state(const ls::optim::OptimizerState& a, const ls::optim::OptimizerState& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [key, value] : a) {
    auto it = b.find(key);
    if (it == b.end() || !ls::equal(value.detach().contiguous(), it->second.detach().contiguous())) {
      MESSAGE("state dicts differ at '", key, "'");
      return false;
    }
  }
  return true;
}

// At `world` ranks: load the 2-rank run's state (whole, then from its shards),
// check it round-trips bitwise and that 2 more steps match the 2-rank run's.
void load_at(int world, const ls::testing::TempDir& dir, const dist::ZeroOptions& zo) {
  ls::testing::run_ranks(world, [&](int rank) {
    auto pg = dist::init_process_group("gloo");
    const auto full = ls::nn::load_tensors(dir.file("full.safetensors"));
    const std::vector<ls::optim::OptimizerState> shards = {ls::nn::load_tensors(dir.file("shard0.safetensors")),
                                                           ls::nn::load_tensors(dir.file("shard1.safetensors"))};
    for (int from_shards = 0; from_shards < 2; ++from_shards) {
      auto model = std::make_shared<ls::testing::ReorderedMLP>();
      ls::nn::load(*model, dir.file("model.safetensors"));
      dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().bucket_cap_mb(0.0005));
      dist::ZeroRedundancyOptimizer opt(model->parameters(), pg, ls::optim::AdamWOptions(1e-2), zo);
      if (from_shards) {
        opt.load_sharded_state_dicts(shards);
      } else {
        opt.load_state_dict(full);
      }
      opt.consolidate_state_dict(0);
      if (rank == 0) CHECK(same_state(opt.state_dict(), full));
      if (world != 2) {
        CHECK_THROWS_WITH_AS(opt.load_state_dict(shards[0]), doctest::Contains("load_sharded_state_dicts"), ls::Error);
      }
      train_steps(ddp, opt, pg, 2, 2);
      const auto expected = ls::nn::load_tensors(dir.file("final.safetensors"));
      const auto got = model->named_parameters();
      for (const auto& [name, p] : got) {
        CAPTURE(name);
        CHECK(ls::testing::max_abs_diff({p}, {expected.at(name)}) <= 1e-5);
      }
      ls::testing::check_same_on_all_ranks(model->parameters(), *pg);
    }
  }, 120s);
}

void save_at_2_and_load(const dist::ZeroOptions& zo) {
  ls::testing::TempDir dir("zero_state_dict");
  ls::testing::run_ranks(2, [&](int rank) {
    auto pg = dist::init_process_group("gloo");
    ls::manual_seed(0);
    auto model = std::make_shared<ls::testing::ReorderedMLP>();
    if (rank == 0) ls::nn::save(*model, dir.file("start.safetensors"));
    dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().bucket_cap_mb(0.0005));
    dist::ZeroRedundancyOptimizer opt(model->parameters(), pg, ls::optim::AdamWOptions(1e-2), zo);
    if (opt.split_parameters_mb() > 0 && opt.split_parameters_mb() < 0.001) {
      CHECK(opt.owner(2) == dist::kEveryRank);  // fc2.weight, 1024 bytes, sliced over the ranks
      const auto sharded = opt.sharded_state_dict();
      CHECK(sharded.count("zero.slice.2") == 0);  // no state before the first step
    }
    ls::manual_seed(0);
    auto ref_model = std::make_shared<ls::testing::ReorderedMLP>();
    dist::DistributedDataParallel ref_ddp(ref_model, pg, dist::DDPOptions().bucket_cap_mb(0.0005));
    ls::optim::AdamW ref(ref_model->parameters(), ls::optim::AdamWOptions(1e-2));
    train_steps(ddp, opt, pg, 0, 2);
    train_steps(ref_ddp, ref, pg, 0, 2);
    CHECK_THROWS_WITH_AS(opt.state_dict(), doctest::Contains("consolidate_state_dict"), ls::Error);
    opt.consolidate_state_dict(0);
    if (rank == 0) {
      CHECK(same_state(opt.state_dict(), ref.state_dict()));
      ls::nn::save_tensors(opt.state_dict(), dir.file("full.safetensors"));
      ls::nn::save(*model, dir.file("model.safetensors"));
    } else {
      CHECK_THROWS_WITH_AS(opt.state_dict(), doctest::Contains("consolidated on rank 0"), ls::Error);
    }
    const auto shard = opt.sharded_state_dict();
    if (opt.owner(2) == dist::kEveryRank) {  // this rank's slice of fc2.weight's moments: half of its 256
      CHECK(shard.at("state.2.exp_avg").numel() == 128);
      CHECK(shard.at("zero.slice.2").to_vector<int64_t>() == std::vector<int64_t>{128 * rank, 128});
    }
    ls::nn::save_tensors(shard, dir.file("shard" + std::to_string(rank) + ".safetensors"));
    // A rank's own shard loads back at the same world size.
    opt.load_state_dict(opt.sharded_state_dict());
    opt.consolidate_state_dict(0);
    train_steps(ddp, opt, pg, 2, 2);
    if (rank == 0) CHECK_THROWS_WITH_AS(opt.state_dict(), doctest::Contains("stale"), ls::Error);
    if (rank == 0) ls::nn::save(*model, dir.file("final.safetensors"));
  }, 120s);
  load_at(1, dir, zo);
  load_at(4, dir, zo);
}

}  // namespace

TEST_CASE("zero state dict: consolidated is a plain AdamW's, saved at 2 ranks it loads at 1 and 4, whole or sharded") {
  save_at_2_and_load(dist::ZeroOptions());
}

TEST_CASE("zero state dict with split parameters: the slices consolidate into a plain AdamW's state and reload "
          "at 1, 2 and 4 ranks") {
  // fc2.weight (256 floats, 1024 bytes) is split at 2 and 4 ranks (slices of 128 and 64).
  save_at_2_and_load(dist::ZeroOptions().split_parameters_mb(0.0005));
}

TEST_CASE("zero misuse: clear errors for wrong calls and unsupported combinations") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    using ls::testing::TinyCNN;
    auto batch = [] { return ls::randn({2, 3, 8, 8}); };
    auto overlap = dist::ZeroOptions().overlap_with_ddp(true);
    const auto adamw = ls::optim::AdamWOptions(1e-3);
    {  // plain: step before any backward
      auto model = std::make_shared<TinyCNN>();
      dist::ZeroRedundancyOptimizer opt(model->parameters(), pg, adamw);
      CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("no parameter has a gradient"), ls::Error);
    }
    {  // overlap: not attached; then attached but no synced backward; clipping; a second hook
      auto model = std::make_shared<TinyCNN>();
      dist::DistributedDataParallel ddp(model, pg);
      dist::ZeroRedundancyOptimizer opt(model->parameters(), pg, adamw, overlap);
      CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("hook_with_zero_step"), ls::Error);
      dist::hook_with_zero_step(ddp, opt);
      CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("no synced backward"), ls::Error);
      {
        auto guard = ddp.no_sync();
        ddp.forward(batch()).sum().backward();
      }
      CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("no synced backward"), ls::Error);
      CHECK_THROWS_WITH_AS(opt.clip_grad_norm_(1.0), doctest::Contains("overlap_with_ddp"), ls::Error);
      CHECK_THROWS_WITH_AS(ddp.join([] {}), doctest::Contains("hook_with_zero_step"), ls::Error);
      CHECK_THROWS_WITH_AS(dist::hook_with_zero_step(ddp, opt), doctest::Contains("already"), ls::Error);
      // A forgotten step(): the next synced backward refuses (every rank alike).
      ddp.forward(batch()).sum().backward();
      CHECK_THROWS_WITH_AS(ddp.forward(batch()).sum().backward(), doctest::Contains("no step() since"), ls::Error);
    }
    {  // the hook needs an overlapped optimizer over exactly the DDP module's parameters
      auto model = std::make_shared<TinyCNN>();
      dist::DistributedDataParallel ddp(model, pg);
      dist::ZeroRedundancyOptimizer plain(model->parameters(), pg, adamw);
      CHECK_THROWS_WITH_AS(dist::hook_with_zero_step(ddp, plain), doctest::Contains("overlap_with_ddp(true)"), ls::Error);
      auto params = model->parameters();
      params.pop_back();
      dist::ZeroRedundancyOptimizer subset(params, pg, adamw, overlap);
      CHECK_THROWS_WITH_AS(dist::hook_with_zero_step(ddp, subset), doctest::Contains("is not in the ZeroRedundancyOptimizer"), ls::Error);
      auto other = std::make_shared<TinyCNN>();
      params = model->parameters();
      params.push_back(other->parameters()[0]);
      dist::ZeroRedundancyOptimizer extra(params, pg, adamw, overlap);
      CHECK_THROWS_WITH_AS(dist::hook_with_zero_step(ddp, extra), doctest::Contains("is not a trainable parameter of the DDP module"), ls::Error);
    }
    {  // ZeRO-2: needs the overlap; refuses comm hooks (either order), deterministic mode,
       // gradient views, and an attach after the first synced forward
      auto zero2 = dist::ZeroOptions().overlap_with_ddp(true).shard_gradients(true);
      auto model = std::make_shared<TinyCNN>();
      CHECK_THROWS_WITH_AS(dist::ZeroRedundancyOptimizer(model->parameters(), pg, adamw,
                                                         dist::ZeroOptions().shard_gradients(true)),
                           doctest::Contains("needs overlap_with_ddp(true)"), ls::Error);
      auto attach = [&](const dist::DDPOptions& options, bool hook_first, bool hook_after, bool forward_first) {
        auto m = std::make_shared<TinyCNN>();
        dist::DistributedDataParallel ddp(m, pg, options);
        dist::ZeroRedundancyOptimizer opt(m->parameters(), pg, adamw, zero2);
        if (hook_first) ddp.register_comm_hook(pg, dist::comm_hooks::bf16_compress_hook);
        if (forward_first) ddp.forward(batch()).sum().backward();
        dist::hook_with_zero_step(ddp, opt);
        if (hook_after) ddp.register_comm_hook(pg, dist::comm_hooks::bf16_compress_hook);
      };
      CHECK_THROWS_WITH_AS(attach(dist::DDPOptions(), true, false, false),
                           doctest::Contains("ZeRO-2 (ZeroOptions().shard_gradients(true)) with a registered communication hook"),
                           ls::Error);
      CHECK_THROWS_WITH_AS(attach(dist::DDPOptions(), false, true, false),
                           doctest::Contains("register_comm_hook after hook_with_zero_step attached a ZeRO-2"), ls::Error);
      CHECK_THROWS_WITH_AS(attach(dist::DDPOptions().deterministic(true), false, false, false),
                           doctest::Contains("DDPOptions().deterministic(true)"), ls::Error);
      CHECK_THROWS_WITH_AS(attach(dist::DDPOptions().gradient_as_bucket_view(true), false, false, false),
                           doctest::Contains("gradient_as_bucket_view(true)"), ls::Error);
      CHECK_THROWS_WITH_AS(attach(dist::DDPOptions(), false, false, true),
                           doctest::Contains("attached after the first synced forward"), ls::Error);
      CHECK_NOTHROW(attach(dist::DDPOptions(), false, false, false));
    }
    {  // different parameters on different ranks
      auto model = std::make_shared<TinyCNN>();
      auto params = model->parameters();
      if (rank == 1) params.pop_back();
      CHECK_THROWS_WITH_AS(dist::ZeroRedundancyOptimizer(params, pg, adamw), doctest::Contains("same parameters"), ls::Error);
    }
  }, 60s);
}
