// distributed/ddp/optimizer_step_check.cpp — the step-count comparison of the replica check
// (Note [Optimizer step check]).
// Read before: distributed/ddp/optimizer_step_check.h.
#include "distributed/ddp/optimizer_step_check.h"

#include <sstream>

namespace lockstep::distributed::detail {

StepCounter step_counter(std::function<int64_t()> count) {
  return [count = std::move(count)] {
    const int64_t n = count();
    return OptimizerSteps{n, n};
  };
}

namespace {

std::string counts_text(const OptimizerSteps& s) {
  if (s.steps < 0) return "no optimizer registered";
  std::ostringstream os;
  os << s.steps << (s.steps == 1 ? " step" : " steps") << " (" << s.updates << " parameter updates)";
  return os.str();
}

}  // namespace

std::string describe_step_divergence(const std::vector<OptimizerSteps>& all, int64_t forward,
                                     int64_t last_good_forward, int my_rank) {
  // Ranks grouped by equal counts, in order of their lowest rank.
  std::vector<std::vector<int>> groups;
  for (size_t r = 0; r < all.size(); ++r) {
    size_t g = 0;
    while (g < groups.size() && !(all[groups[g].front()] == all[r])) ++g;
    if (g == groups.size()) groups.emplace_back();
    groups[g].push_back(static_cast<int>(r));
  }
  if (groups.size() <= 1) return "";
  std::ostringstream os;
  os << "DDP replica check (rank " << my_rank << "): the optimizers' step counts differ at synced iteration "
     << forward << " (they were equal at "
     << (last_good_forward == 0 ? std::string("construction") : "iteration " + std::to_string(last_good_forward))
     << "): ";
  for (size_t g = 0; g < groups.size(); ++g) {
    os << (g ? "; " : "") << (groups[g].size() == 1 ? "rank " : "ranks ");
    for (size_t i = 0; i < groups[g].size(); ++i) os << (i ? ", " : "") << groups[g][i];
    os << ": " << counts_text(all[groups[g].front()]);
  }
  os << " (this rank: " << counts_text(all[my_rank]) << "). Every rank must call optimizer.step() in the same "
        "iterations: look for a step skipped or repeated on some ranks (after a non-finite loss or a failed "
        "check seen by one rank only, a gradient-accumulation count that differs per rank), an optimizer state "
        "loaded on some ranks only, or ddp.register_optimizer / register_step_count called on some ranks "
        "only. (DDPOptions().check_replicas_every(0) or LOCKSTEP_REPLICA_CHECK_EVERY=0 turns the periodic check "
        "off.)";
  return os.str();
}

}  // namespace lockstep::distributed::detail
