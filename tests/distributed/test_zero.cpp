// tests/distributed/test_zero.cpp — ZeroRedundancyOptimizer (distributed/zero/):
// the partition (Note [ZeRO partition]); at 2 and 4 ranks, SGD, Adam and AdamW
// sharded, with and without the overlap with DDP (Note [ZeRO overlap with
// DDP]) and with sharded gradients (ZeRO-2, Note [ZeRO-2 buckets]), give the parameters of plain DDP + the same optimizer (bitwise here;
// the issue asks 1e-6), bitwise equal on every rank, with a learning-rate
// scheduler, global-norm clipping, no_sync accumulation, gradient views,
// find_unused_parameters, static_graph, deterministic reduction and the bf16 / PowerSGD comm hooks;
// ranks that own nothing. State dicts and misuse: test_zero_state_dict.cpp.
// Read before: distributed/zero/zero_redundancy_optimizer.h, tests/distributed/zero_test_util.h.
#include <doctest/doctest.h>

#include <algorithm>

#include "tests/distributed/zero_test_util.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
namespace hooks = lockstep::distributed::comm_hooks;
using namespace std::chrono_literals;
using ls::testing::ZeroMode;
using ls::testing::ZeroOpt;
using ls::testing::ZeroRun;

using ls::testing::check_equals_plain;

TEST_CASE("zero partition: greedy largest-first onto the least-loaded rank, ties to lower indices and ranks") {
  auto t = [](int64_t n) { return ls::zeros({n}); };
  // 640 is more than half the total: it fills rank 0 alone.
  const std::vector<ls::Tensor> params = {t(108), t(4), t(4), t(288), t(8), t(640), t(5)};
  const dist::ZeroPartition p = dist::partition_parameters(params, 2);
  CHECK(p.owned[0] == std::vector<size_t>{5});
  CHECK(p.owned[1] == std::vector<size_t>{0, 1, 2, 3, 4, 6});
  CHECK(p.elements == std::vector<int64_t>{640, 417});
  // Equal sizes: lower index first, onto the lower rank.
  const dist::ZeroPartition q = dist::partition_parameters({t(3), t(3), t(3), t(3)}, 3);
  CHECK(q.owner == std::vector<int>{0, 1, 2, 0});
  // More ranks than parameters: some own nothing.
  const dist::ZeroPartition e = dist::partition_parameters({t(2), t(1)}, 4);
  CHECK(e.owner == std::vector<int>{0, 1});
  CHECK(e.owned[2].empty());
  CHECK(e.owned[3].empty());
}

TEST_CASE("zero partition: parameters above the split size are sliced over every rank, the rest dealt after") {
  auto t = [](int64_t n) { return ls::zeros({n}); };
  // 1000 floats (4000 bytes) > 2000 bytes: split; s = ceil(1000 / 3) rounded up to 64 = 384.
  const std::vector<ls::Tensor> params = {t(10), t(1000), t(400), t(20)};
  const dist::ZeroPartition p = dist::partition_parameters(params, 3, 2000);
  CHECK(p.owner[1] == dist::kEveryRank);
  CHECK(p.split(1));
  CHECK_FALSE(p.split(2));  // 1600 bytes
  CHECK(p.range(1, 0).begin == 0);
  CHECK(p.range(1, 0).length == 384);
  CHECK(p.range(1, 1).begin == 384);
  CHECK(p.range(1, 2).begin == 768);
  CHECK(p.range(1, 2).length == 232);
  // Slices first (384, 384, 232), then largest first onto the least loaded: 400 to rank 2, 20 and 10 to 0 and 1.
  CHECK(p.owner[2] == 2);
  CHECK(p.owner[3] == 0);
  CHECK(p.owner[0] == 1);
  CHECK(p.owned[2] == std::vector<size_t>{1, 2});
  CHECK(p.elements == std::vector<int64_t>{404, 394, 632});
  CHECK(p.range(2, 2).length == 400);
  CHECK(p.range(2, 0).length == 0);
  // One rank, a slice that would be empty (300 elements over 4 ranks: s = 128, rank 3 would start at 384),
  // or no threshold: nothing is split.
  CHECK_FALSE(dist::partition_parameters(params, 1, 2000).split(1));
  CHECK_FALSE(dist::partition_parameters({t(300)}, 4, 100).split(0));
  CHECK(dist::partition_parameters({t(300)}, 3, 100).split(0));
  CHECK_FALSE(dist::partition_parameters(params, 3).split(1));
}

TEST_CASE("zero split parameters: sliced over 2 and 4 ranks, every mode equals plain DDP, pieces within slices") {
  // TinyCNN's fc.weight (640 floats) is split at 2 and 4 ranks, conv2's weight (288) at 2 only.
  for (int world : {2, 4}) {
    ls::testing::run_ranks(world, [](int) {
      auto pg = dist::init_process_group("gloo");
      auto model = std::make_shared<ls::testing::TinyCNN>();
      dist::ZeroRedundancyOptimizer probe(model->parameters(), pg, ls::optim::AdamWOptions(1e-2),
                                          dist::ZeroOptions().split_parameters_mb(0.001));
      int split = 0;
      for (size_t i = 0; i < model->parameters().size(); ++i) split += probe.owner(i) == dist::kEveryRank;
      CHECK(split == (pg->size() == 2 ? 2 : 1));
      ZeroRun run;
      run.split_mb = 0.001;
      run.steps = 3;
      check_equals_plain(pg, run);
      run.opt = ZeroOpt::SGD;
      run.accumulate = 2;  // and under no_sync
      check_equals_plain(pg, run);
    }, 180s);
  }
}

TEST_CASE("zero: 2 ranks equal plain DDP for SGD, Adam and AdamW, with and without overlap, bitwise on every rank") {
  ls::testing::run_ranks(2, [](int) {
    auto pg = dist::init_process_group("gloo");
    for (ZeroOpt opt : {ZeroOpt::SGD, ZeroOpt::Adam, ZeroOpt::AdamW}) {
      ZeroRun run;
      run.opt = opt;
      check_equals_plain(pg, run);
    }
    // Global-norm clipping (not with overlap: refused, test_zero_state_dict.cpp).
    ZeroRun clip;
    clip.clip = true;
    check_equals_plain(pg, clip, {ZeroMode::Zero});
  }, 120s);
}

TEST_CASE("zero: docs/api.md's spelling ZeroRedundancyOptimizer<AdamW> steps like a plain AdamW") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    ls::manual_seed(0);
    auto net = std::make_shared<ls::nn::Linear>(5, 3);
    auto ref_net = std::make_shared<ls::nn::Linear>(5, 3);
    ref_net->load_state_dict(net->state_dict());
    const auto initial = ls::testing::clone_all(net->parameters());
    dist::DistributedDataParallel ddp(net, pg), ref_ddp(ref_net, pg);
    dist::ZeroRedundancyOptimizer<ls::optim::AdamW> zero(net->parameters(), pg,
                                                         ls::optim::AdamWOptions(1e-3).weight_decay(0.01));
    ls::optim::AdamW ref(ref_net->parameters(), ls::optim::AdamWOptions(1e-3).weight_decay(0.01));
    for (int step = 0; step < 2; ++step) {
      ls::manual_seed(1 + rank + 2 * step);
      const ls::Tensor x = ls::randn({4, 5});
      zero.zero_grad();
      ref.zero_grad();
      ddp.forward(x).pow(2).sum().backward();
      ref_ddp.forward(x).pow(2).sum().backward();
      zero.step();
      ref.step();
    }
    CHECK(ls::testing::all_equal(net->parameters(), ref_net->parameters()));
    CHECK_FALSE(ls::testing::all_equal(net->parameters(), initial));  // it did step
  }, 60s);
}

TEST_CASE("zero: 4 ranks equal plain DDP (AdamW and SGD), every mode") {
  ls::testing::run_ranks(4, [](int) {
    auto pg = dist::init_process_group("gloo");
    ZeroRun run;
    run.steps = 3;
    check_equals_plain(pg, run);
    run.opt = ZeroOpt::SGD;
    check_equals_plain(pg, run);
  }, 180s);
}

TEST_CASE("zero: ranks that own no parameter (4 ranks, 2 parameters) still step, schedule and broadcast, "
          "large parameters broadcast in place") {
  ls::testing::run_ranks(4, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    // Linear(3, 2): every parameter packed; Linear(300, 256): its 300 KB weight is broadcast in
    // place, the bias packed (Note [ZeRO parameter broadcasts]).
    for (int64_t in : {3, 300})
    for (int stage : {1, 2})
    for (bool overlap : {false, true}) {
      if (stage == 2 && !overlap) continue;  // ZeRO-2 is overlapped
      CAPTURE(in);
      CAPTURE(stage);
      const int64_t out = in == 3 ? 2 : 256;
      ls::manual_seed(0);
      auto model = std::make_shared<ls::nn::Linear>(in, out);
      dist::DistributedDataParallel ddp(model, pg);
      dist::ZeroRedundancyOptimizer opt(model->parameters(), pg, ls::optim::AdamWOptions(1e-2),
                                        dist::ZeroOptions().overlap_with_ddp(overlap).shard_gradients(stage == 2));
      if (overlap) dist::hook_with_zero_step(ddp, opt);
      ls::manual_seed(0);
      auto ref_model = std::make_shared<ls::nn::Linear>(in, out);
      dist::DistributedDataParallel ref_ddp(ref_model, pg);
      ls::optim::AdamW ref(ref_model->parameters(), ls::optim::AdamWOptions(1e-2));
      ls::optim::StepLR sched(opt, 1, 0.5), ref_sched(ref, 1, 0.5);
      CHECK(opt.partition().owned[static_cast<size_t>(rank)].empty() == (rank >= 2));
      for (int step = 0; step < 3; ++step) {
        ls::manual_seed(10 + step * 4 + rank);
        const ls::Tensor x = ls::randn({2, in});
        ddp.forward(x).pow(2).sum().backward();
        ref_ddp.forward(x).pow(2).sum().backward();
        opt.step();
        ref.step();
        opt.zero_grad();
        ref.zero_grad();
        sched.step();
        ref_sched.step();
      }
      CHECK(opt.lr() == ref.lr());
      opt.wait_for_broadcasts();  // the parameters are read below, outside a forward
      // ZeRO-2 sums 4 ranks in the reduce's order (Note [ZeRO-2 buckets]).
      CHECK(ls::testing::max_abs_diff(model->parameters(), ref_model->parameters()) <= 1e-6);
      if (stage == 1) CHECK(ls::testing::all_equal(model->parameters(), ref_model->parameters()));
      ls::testing::check_same_on_all_ranks(model->parameters(), *pg);
    }
  }, 120s);
}

TEST_CASE("zero overlap: no_sync, gradient views, static_graph, deterministic and the bf16 / PowerSGD hooks equal plain DDP with them") {
  ls::testing::run_ranks(2, [](int) {
    auto pg = dist::init_process_group("gloo");
    const std::vector<ZeroMode> zero1 = {ZeroMode::Zero, ZeroMode::Overlap};  // ZeRO-2 refuses the rest
    ZeroRun run;
    run.steps = 3;
    run.accumulate = 2;  // every other backward inside no_sync()
    check_equals_plain(pg, run);
    run.accumulate = 1;
    run.ddp = dist::DDPOptions().bucket_cap_mb(0.002).gradient_as_bucket_view(true);
    check_equals_plain(pg, run, zero1);
    run.ddp = dist::DDPOptions().bucket_cap_mb(0.002).static_graph(true);
    check_equals_plain(pg, run);
    run.ddp = dist::DDPOptions().bucket_cap_mb(0.002).deterministic(true);
    check_equals_plain(pg, run, zero1);
    run.ddp = dist::DDPOptions().bucket_cap_mb(0.002);
    run.setup = [pg](auto& ddp) { ddp.register_comm_hook(pg, hooks::bf16_compress_hook); };
    check_equals_plain(pg, run, zero1);
    run.setup = [pg](auto& ddp) {
      // A fresh state per run: the error feedback must start alike.
      ddp.register_comm_hook(std::make_shared<hooks::PowerSGDState>(
                                 pg, hooks::PowerSGDOptions().matrix_approximation_rank(1).start_powersgd_iter(1)),
                             hooks::powersgd_hook);
    };
    check_equals_plain(pg, run, zero1);
  }, 180s);
}

TEST_CASE("zero overlap: find_unused_parameters, locally and globally unused branches, equals plain DDP") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    std::vector<std::vector<ls::Tensor>> results;
    for (ZeroMode mode : {ZeroMode::Plain, ZeroMode::Zero, ZeroMode::Overlap, ZeroMode::Zero2}) {
      ls::manual_seed(0);
      auto model = std::make_shared<ls::testing::BranchyMLP>();
      dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().find_unused_parameters(true).bucket_cap_mb(0.0001));
      auto opt = ls::testing::make_zero_test_optimizer(ZeroOpt::Adam, mode, model->parameters(), pg);
      if (ls::testing::zero_overlapped(mode)) {
        dist::hook_with_zero_step(ddp, dynamic_cast<dist::ZeroRedundancyOptimizerBase&>(*opt));
      }
      for (int step = 0; step < 4; ++step) {
        // Step 0: used everywhere; 1: on rank 0 only; 2, 3: nowhere (skipped by the optimizer).
        const bool use_side = step == 0 || (step == 1 && rank == 0);
        ls::manual_seed(100 + step * 2 + rank);
        ddp.forward(ls::randn({3, 6}), use_side).pow(2).mean().backward();
        opt->step();
        opt->zero_grad();
      }
      ls::testing::wait_for_broadcasts(*opt);
      results.push_back(ls::testing::clone_all(model->parameters()));
    }
    CHECK(ls::testing::all_equal(results[0], results[1]));
    CHECK(ls::testing::all_equal(results[0], results[2]));
    CHECK(ls::testing::all_equal(results[0], results[3]));
    ls::testing::check_same_on_all_ranks(results[2], *pg);
    ls::testing::check_same_on_all_ranks(results[3], *pg);
  }, 120s);
}

namespace {

// Three parameters of 256 KB and more (broadcast in place, in pieces), registered so that the
// 2-rank partition gives rank 1 `side` (sometimes unused everywhere) before `big` in its shard.
struct PiecesNet : ls::nn::Module {
  std::shared_ptr<ls::nn::Linear> fc1, side, big, bigger, head;
  PiecesNet() {
    fc1 = register_module("fc1", std::make_shared<ls::nn::Linear>(16, 256));
    side = register_module("side", std::make_shared<ls::nn::Linear>(256, 256));    // 65536 weights
    big = register_module("big", std::make_shared<ls::nn::Linear>(256, 300));      // 76800
    bigger = register_module("bigger", std::make_shared<ls::nn::Linear>(300, 300));  // 90000
    head = register_module("head", std::make_shared<ls::nn::Linear>(300, 3));
  }
  ls::Tensor forward(const ls::Tensor& x, bool use_side) {
    ls::Tensor h = fc1->forward(x).relu();                   // (B, 256)
    if (use_side) h = h + side->forward(h).tanh();
    return head->forward(bigger->forward(big->forward(h).tanh()).tanh());  // (B, 3)
  }
};

}  // namespace

TEST_CASE("zero pipelined broadcasts: large parameters (whole, or split over the ranks) stepped and sent in "
          "pieces, one skipped as globally unused before a stepped one, equal plain DDP bitwise in every mode") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    std::vector<std::vector<ls::Tensor>> results;
    const std::vector<std::pair<ZeroMode, double>> runs = {
        {ZeroMode::Plain, 0},   {ZeroMode::Zero, 0},     {ZeroMode::Overlap, 0},  {ZeroMode::Zero2, 0},
        {ZeroMode::Zero, 0.2},  {ZeroMode::Overlap, 0.2}, {ZeroMode::Zero2, 0.2}};
    for (const auto& [mode, split_mb] : runs) {
      CAPTURE(ls::testing::zero_mode_name(mode));
      CAPTURE(split_mb);
      ls::manual_seed(0);
      auto model = std::make_shared<PiecesNet>();
      dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().find_unused_parameters(true));
      std::unique_ptr<ls::optim::Optimizer> opt;
      const auto adamw = ls::optim::AdamWOptions(1e-2);
      if (mode == ZeroMode::Plain) {
        opt = std::make_unique<ls::optim::AdamW>(model->parameters(), adamw);
      } else {
        auto zero = std::make_unique<dist::ZeroRedundancyOptimizer<ls::optim::AdamW>>(
            model->parameters(), pg, adamw,
            dist::ZeroOptions()
                .overlap_with_ddp(ls::testing::zero_overlapped(mode))
                .shard_gradients(mode == ZeroMode::Zero2)
                .broadcast_piece_mb(0.05)  // 13056-element pieces: 6-7 per large weight, 3-4 per slice
                .split_parameters_mb(split_mb));  // 0.2: side, big and bigger's weights are split
        const auto& owned = zero->partition().owned[1];
        const auto pos = [&](size_t i) { return std::find(owned.begin(), owned.end(), i) - owned.begin(); };
        const int owner = split_mb > 0 ? dist::kEveryRank : 1;
        CHECK(zero->owner(2) == owner);  // side.weight
        CHECK(zero->owner(4) == owner);  // big.weight, after it in rank 1's shard
        CHECK(zero->owner(6) == (split_mb > 0 ? dist::kEveryRank : 0));  // bigger.weight
        CHECK(pos(2) < pos(4));
        if (ls::testing::zero_overlapped(mode)) dist::hook_with_zero_step(ddp, *zero);
        opt = std::move(zero);
      }
      for (int step = 0; step < 4; ++step) {
        // Step 0: side used everywhere; 1: on rank 0 only; 2, 3: nowhere (its owner skips it).
        const bool use_side = step == 0 || (step == 1 && rank == 0);
        ls::manual_seed(200 + step * 2 + rank);
        ddp.forward(ls::randn({4, 16}), use_side).pow(2).mean().backward();
        opt->step();
        opt->zero_grad();
      }
      ls::testing::wait_for_broadcasts(*opt);
      results.push_back(ls::testing::clone_all(model->parameters()));
      ls::testing::check_same_on_all_ranks(results.back(), *pg);
    }
    for (size_t m = 1; m < results.size(); ++m) {
      CAPTURE(m);
      CHECK(ls::testing::all_equal(results[0], results[m]));
    }
  }, 120s);
}

namespace {

// Eight Linear(6, 6) in a row: with tiny buckets, one bucket per layer.
struct Chain : ls::nn::Module {
  std::vector<std::shared_ptr<ls::nn::Linear>> layers;
  Chain() {
    for (int k = 0; k < 8; ++k) {
      layers.push_back(register_module("l" + std::to_string(k), std::make_shared<ls::nn::Linear>(6, 6)));
    }
  }
  ls::Tensor forward(const ls::Tensor& x) {
    ls::Tensor h = x;
    for (auto& l : layers) h = l->forward(h).tanh();
    return h;
  }
};

}  // namespace

TEST_CASE("reducer: with a bucket-reduced hook, bucket b is handed over when bucket b + 4 is launched, "
          "during backward, the rest at its end, all in index order") {
  ls::testing::run_ranks(2, [](int) {
    auto pg = dist::init_process_group("gloo");
    ls::manual_seed(0);
    auto model = std::make_shared<Chain>();
    dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().bucket_cap_mb(0.0001).first_bucket_mb(0.0001));
    const size_t buckets = ddp.reducer().num_buckets();
    REQUIRE(buckets >= 6);
    const int params = static_cast<int>(model->parameters().size());
    int accumulated = 0;  // gradients accumulated so far in this backward
    std::vector<ls::autograd::HookHandle> counters;
    for (auto& p : model->parameters()) {
      counters.push_back(p.register_post_accumulate_grad_hook([&](ls::Tensor&) { ++accumulated; }));
    }
    std::vector<size_t> order;
    std::vector<int> accumulated_at;
    dist::register_bucket_reduced_hook(ddp, [&](size_t bucket, const std::vector<size_t>&,
                                                 const dist::BucketHandover::GradientWait&) {
      order.push_back(bucket);
      accumulated_at.push_back(accumulated);
    });
    ddp.forward(ls::randn({3, 6})).pow(2).mean().backward();
    REQUIRE(order.size() == buckets);
    for (size_t b = 0; b < buckets; ++b) {
      CAPTURE(b);
      CHECK(order[b] == b);
      // Buckets 0 .. buckets-5 went when bucket b + 4 was launched, before the last gradients
      // had been accumulated; the last four at the end.
      if (b + 4 < buckets) CHECK(accumulated_at[b] < params);
      else CHECK(accumulated_at[b] == params);
    }
    for (auto& h : counters) h.remove();
  }, 60s);
}
