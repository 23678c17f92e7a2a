// distributed/ddp/optimizer_step_check.h — the optimizer's step count in DDP's replica
// check: a rank whose optimizer took a step more or less than the others' is named.
//
// § Note [Optimizer step check]
// DDP does not own the optimizer, so the replica check (Note [Replica
// divergence check]) sees only what the steps did to the parameters. A rank
// whose optimizer stepped once more or once less usually leaves different
// parameters, and the check says so — but not why, and not always: an extra
// step() over zero gradients (zero_grad(false)) leaves SGD's parameters bitwise
// equal while its step count, and with it Adam's bias correction and every
// scheduler keyed on it, is now off by one on that rank. So a training loop can
// hand DDP its optimizer:
//
//   ls::optim::Adam opt(model->parameters(), ...);
//   ddp.register_optimizer(opt);   // compared at every replica check from now on
//
// and each replica check also all-gathers, in the same allgather, the
// optimizer's step count (the most steps any of its parameters took,
// Optimizer::step_count) and its parameter updates (their sum, which also sees
// one parameter skipped on one rank). Ranks whose counts differ fail the check
// first, with the counts of every rank and the usual causes; a rank that
// registered no optimizer while another did is named too. A loop that keeps its
// own count registers it instead: ddp.register_step_count([&] { return steps; }).
// The optimizer (or the count's captures) must outlive the wrapper's forwards.
// ZeroRedundancyOptimizer keeps its per-parameter counts in each rank's shard,
// which differ by design: register the count of steps the loop took instead.
// Read before: distributed/ddp/replica_check.h. Read next:
// distributed/ddp/distributed_data_parallel.h (register_optimizer).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lockstep::distributed::detail {

// One rank's count; -1 in both when no optimizer or count is registered.
struct OptimizerSteps {
  int64_t steps = -1;    // the most steps any parameter took
  int64_t updates = -1;  // steps summed over the parameters
  bool operator==(const OptimizerSteps&) const = default;
};
using StepCounter = std::function<OptimizerSteps()>;

// Any optimizer with parameters() and step_count(i) (optim::Optimizer; a
// template so that DDP need not depend on the optimizers).
template <class Optimizer>
StepCounter step_counter(const Optimizer& optimizer) {
  return [&optimizer] {
    OptimizerSteps s{0, 0};
    for (size_t i = 0; i < optimizer.parameters().size(); ++i) {
      const int64_t n = optimizer.step_count(i);
      s.steps = n > s.steps ? n : s.steps;
      s.updates += n;
    }
    return s;
  };
}

// A count the training loop keeps: steps and updates are both that count.
StepCounter step_counter(std::function<int64_t()> count);

// "" when every rank's counts equal rank 0's; otherwise the error text of the
// replica check at synced iteration `forward` on `my_rank`: every rank's counts,
// grouped, and the causes. `last_good_forward`: the last check that passed (0: construction).
std::string describe_step_divergence(const std::vector<OptimizerSteps>& all, int64_t forward,
                                     int64_t last_good_forward, int my_rank);

}  // namespace lockstep::distributed::detail
