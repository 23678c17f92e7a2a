// bench/bench_optimizer.h — the optimizer of bench_ddp: plain SGD (momentum) or
// AdamW, or either sharded by ZeroRedundancyOptimizer (--zero 1), optionally
// overlapped with DDP (--zero-overlap 1, hook_with_zero_step), or with the
// gradients sharded too (--zero 2), and the bytes of
// optimizer state this rank holds.
// Read before: distributed/zero/zero_redundancy_optimizer.h. Used by: bench/bench_ddp.cpp.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/factory.h"
#include "distributed/distributed.h"
#include "optim/optim.h"

namespace lockstep::bench {

struct BenchOptimizer {
  std::unique_ptr<optim::Optimizer> opt;
  distributed::ZeroRedundancyOptimizerBase* zero = nullptr;  // set with --zero 1
};

// `name`: "sgd" (lr 0.01, momentum 0.9) or "adamw" (lr 1e-4, weight decay 0.01);
// `zo`: the ZeRO options beyond the stage (split parameters, pieces, broadcast group).
inline BenchOptimizer make_bench_optimizer(const std::string& name, int zero, bool overlap,
                                           const std::vector<Tensor>& params,
                                           const std::shared_ptr<distributed::ProcessGroup>& pg,
                                           distributed::ZeroOptions zo = {}) {
  const auto sgd = optim::SGDOptions(0.01).momentum(0.9);
  const auto adamw = optim::AdamWOptions(1e-4).weight_decay(0.01);
  BenchOptimizer b;
  if (zero == 0) {
    if (name == "sgd") b.opt = std::make_unique<optim::SGD>(params, sgd);
    else b.opt = std::make_unique<optim::AdamW>(params, adamw);
    return b;
  }
  zo.overlap_with_ddp(overlap || zero == 2).shard_gradients(zero == 2);
  std::unique_ptr<distributed::ZeroRedundancyOptimizerBase> z;
  if (name == "sgd") z = std::make_unique<distributed::ZeroRedundancyOptimizer<optim::SGD>>(params, pg, sgd, zo);
  else z = std::make_unique<distributed::ZeroRedundancyOptimizer<optim::AdamW>>(params, pg, adamw, zo);
  b.zero = z.get();
  b.opt = std::move(z);
  return b;
}

// Bytes of per-parameter optimizer buffers (momentum, moments) held by this rank.
inline double optimizer_state_mb(const BenchOptimizer& b) {
  const optim::OptimizerState s = b.zero ? b.zero->local_optimizer().state_dict() : b.opt->state_dict();
  double bytes = 0;
  for (const auto& [key, t] : s) {
    if (key.rfind("state.", 0) == 0 && t.dim() > 0) bytes += static_cast<double>(t.numel() * t.element_size());
  }
  return bytes / (1 << 20);
}

// A JSON array of every rank's `value` (collective), e.g. "[812.5,640.1]".
inline std::string per_rank_json(distributed::ProcessGroup& pg, double value) {
  Tensor mine = full({1}, value, TensorOptions().dtype(kFloat64));
  std::vector<Tensor> all;
  pg.allgather(all, mine)->wait(pg.timeout());
  std::string out = "[";
  for (size_t r = 0; r < all.size(); ++r) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.1f", r ? "," : "", all[r].item<double>());
    out += buf;
  }
  return out + "]";
}

}  // namespace lockstep::bench
