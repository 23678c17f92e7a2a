// tests/distributed/zero_test_util.h — training loops shared by the ZeRO tests:
// the same few DDP iterations with a plain optimizer, a ZeroRedundancyOptimizer,
// or one overlapped with DDP (hook_with_zero_step), so that the tests compare
// the resulting parameters.
// Read before: distributed/zero/zero_redundancy_optimizer.h, tests/distributed/ddp_beyond_util.h.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <doctest/doctest.h>

#include "tests/distributed/ddp_beyond_util.h"

namespace lockstep::testing {

enum class ZeroOpt { SGD, Adam, AdamW };
// Zero2: overlapped, with the gradients sharded too (ZeroOptions().shard_gradients(true)).
enum class ZeroMode { Plain, Zero, Overlap, Zero2 };

inline const char* zero_mode_name(ZeroMode m) {
  return m == ZeroMode::Plain ? "plain" : m == ZeroMode::Zero ? "zero" : m == ZeroMode::Overlap ? "overlap" : "zero2";
}
inline bool zero_overlapped(ZeroMode m) { return m == ZeroMode::Overlap || m == ZeroMode::Zero2; }

// Linear(in, hidden) -> tanh -> Linear(hidden, out): x (B, in) -> (B, out).
struct TanhMLP : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  TanhMLP(int64_t in, int64_t hidden, int64_t out)
      : fc1(register_module("fc1", std::make_shared<nn::Linear>(in, hidden))),
        fc2(register_module("fc2", std::make_shared<nn::Linear>(hidden, out))) {}
  Tensor forward(const Tensor& x) { return fc2->forward(fc1->forward(x).tanh()); }
};

// Before a test reads the parameters outside a forward: a ZeroRedundancyOptimizer's
// broadcasts of its last step() (Note [ZeRO broadcasts overlap the next forward]).
inline void wait_for_broadcasts(optim::Optimizer& opt) {
  if (auto* zero = dynamic_cast<distributed::ZeroRedundancyOptimizerBase*>(&opt)) zero->wait_for_broadcasts();
}

// A plain optimizer, or a ZeroRedundancyOptimizer (overlapped or not), of kind `opt`.
// split_mb >= 0: ZeroOptions().split_parameters_mb(split_mb) (Note [ZeRO split parameters]).
inline std::unique_ptr<optim::Optimizer> make_zero_test_optimizer(
    ZeroOpt opt, ZeroMode mode, const std::vector<Tensor>& params,
    const std::shared_ptr<distributed::ProcessGroup>& pg, double split_mb = -1,
    const std::function<void(distributed::ZeroOptions&)>& customize = nullptr) {
  const auto sgd = optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3);
  const auto adam = optim::AdamOptions(1e-2).weight_decay(1e-3);
  const auto adamw = optim::AdamWOptions(1e-2);
  if (mode == ZeroMode::Plain) {
    if (opt == ZeroOpt::SGD) return std::make_unique<optim::SGD>(params, sgd);
    if (opt == ZeroOpt::Adam) return std::make_unique<optim::Adam>(params, adam);
    return std::make_unique<optim::AdamW>(params, adamw);
  }
  auto zo = distributed::ZeroOptions().overlap_with_ddp(zero_overlapped(mode)).shard_gradients(mode == ZeroMode::Zero2);
  if (split_mb >= 0) zo.split_parameters_mb(split_mb);
  if (customize) customize(zo);
  if (opt == ZeroOpt::SGD) return std::make_unique<distributed::ZeroRedundancyOptimizer<optim::SGD>>(params, pg, sgd, zo);
  if (opt == ZeroOpt::Adam) return std::make_unique<distributed::ZeroRedundancyOptimizer<optim::Adam>>(params, pg, adam, zo);
  return std::make_unique<distributed::ZeroRedundancyOptimizer<optim::AdamW>>(params, pg, adamw, zo);
}

struct ZeroRun {
  ZeroOpt opt = ZeroOpt::AdamW;
  ZeroMode mode = ZeroMode::Plain;
  distributed::DDPOptions ddp = distributed::DDPOptions().bucket_cap_mb(0.002);
  int steps = 4;
  int accumulate = 1;   // backward passes per step; all but the last inside no_sync()
  bool clip = false;    // clip_grad_norm_(0.05) before each step (not with overlap); it does clip
  bool scheduler = true;  // StepLR(step_size 2, gamma 0.5)
  std::function<void(distributed::DistributedDataParallel<TinyCNN>&)> setup;  // e.g. a comm hook
  double split_mb = -1;   // >= 0: ZeroOptions().split_parameters_mb
  std::function<void(distributed::ZeroOptions&)> zero_options;  // more ZeroOptions (pieces, broadcast group)
};

// After a synced ZeRO-2 backward (Note [ZeRO-2 buckets]): this rank holds
// exactly the gradients it owns (a split parameter's: every rank), and no
// bucket holds a buffer.
template <class M>
void check_zero2_memory(const distributed::DistributedDataParallel<M>& ddp,
                        const distributed::ZeroRedundancyOptimizerBase& zero, int rank) {
  const std::vector<Tensor>& params = zero.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(i);
    CHECK(params[i].grad().defined() == (zero.owner(i) == rank || zero.owner(i) == distributed::kEveryRank));
  }
  for (const distributed::Bucket& b : ddp.reducer().buckets()) CHECK_FALSE(b.flat.defined());
}

// TinyCNN (fc.weight is 640 of its 1057 elements: more than half), `run.steps`
// optimizer steps on 4 examples per rank per backward; returns the parameters.
inline std::vector<Tensor> train_zero(const std::shared_ptr<distributed::ProcessGroup>& pg, const ZeroRun& run) {
  const int world = pg->size(), rank = pg->rank();
  constexpr int64_t per = 4;
  const int backwards = run.steps * run.accumulate;
  auto [x, y] = image_data(backwards * world * per, 321);
  manual_seed(0);
  auto model = std::make_shared<TinyCNN>();
  distributed::DistributedDataParallel ddp(model, pg, run.ddp);
  if (run.setup) run.setup(ddp);
  auto opt = make_zero_test_optimizer(run.opt, run.mode, model->parameters(), pg, run.split_mb, run.zero_options);
  auto* zero = dynamic_cast<distributed::ZeroRedundancyOptimizerBase*>(opt.get());
  if (zero_overlapped(run.mode)) distributed::hook_with_zero_step(ddp, *zero);
  else if (zero) zero->register_forward_waits(*model);  // Note [ZeRO broadcasts overlap the next forward]
  std::unique_ptr<optim::StepLR> sched;
  if (run.scheduler) sched = std::make_unique<optim::StepLR>(*opt, 2, 0.5);
  int b = 0;
  for (int step = 0; step < run.steps; ++step) {
    for (int a = 0; a < run.accumulate; ++a, ++b) {
      const int64_t chunk = b * world + rank;
      auto fwd_bwd = [&] {
        cross_entropy(ddp.forward(chunk_rows(x, chunk, per)), chunk_rows(y, chunk, per)).backward();
      };
      if (a + 1 < run.accumulate) {
        auto guard = ddp.no_sync();
        fwd_bwd();
      } else {
        fwd_bwd();
      }
    }
    if (run.mode == ZeroMode::Zero2) check_zero2_memory(ddp, *zero, rank);
    if (run.clip) {
      if (zero) {
        CHECK(zero->clip_grad_norm_(0.05) > 0.05);
      } else {
        CHECK(optim::clip_grad_norm_(model->parameters(), 0.05) > 0.05);
      }
    }
    opt->step();
    opt->zero_grad();
    if (sched) sched->step();
  }
  wait_for_broadcasts(*opt);
  return clone_all(model->parameters());
}

// ZeRO (every mode in `modes`) against plain DDP for `run` (its mode is
// replaced). ZeRO-2 reduces each gradient to its owner, adding the ranks'
// values in another order than the AllReduce: bitwise at 2 ranks (a + b = b + a),
// within 1e-6 beyond (Note [ZeRO-2 buckets]).
inline void check_equals_plain(const std::shared_ptr<distributed::ProcessGroup>& pg, ZeroRun run,
                               std::vector<ZeroMode> modes = {ZeroMode::Zero, ZeroMode::Overlap, ZeroMode::Zero2}) {
  run.mode = ZeroMode::Plain;
  const auto plain = train_zero(pg, run);
  for (ZeroMode mode : modes) {
    run.mode = mode;
    const auto sharded = train_zero(pg, run);
    const std::string mode_name = zero_mode_name(mode);
    CAPTURE(mode_name);
    CHECK(max_abs_diff(plain, sharded) <= 1e-6);
    if (mode != ZeroMode::Zero2 || pg->size() == 2) CHECK(all_equal(plain, sharded));
    check_same_on_all_ranks(sharded, *pg);
  }
}

}  // namespace lockstep::testing
