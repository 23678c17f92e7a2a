// distributed/ddp/replica_check.cpp — the periodic replica check (Note [Replica divergence
// check]): parameter hashes, their exchange, and the error that names the ranks.
// Read before: distributed/ddp/replica_check.h.
#include "distributed/ddp/replica_check.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/env_flag.h"
#include "core/factory.h"
#include "core/grad_mode.h"

namespace lockstep::distributed::detail {

uint64_t tensor_bytes_hash(const Tensor& original) {
  Tensor t = original.device().is_cpu() ? original.contiguous() : original.to(Device::cpu()).contiguous();
  const auto* bytes = static_cast<const unsigned char*>(t.raw_data());
  const size_t n = t.nbytes();
  // Four independent lanes of multiply-mix over 64-bit words (the compiler
  // vectorises them; the pass is bound by memory bandwidth), then the tail.
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t lane[4] = {1, 2, 3, 4};
  const size_t words = n / 8;
  size_t i = 0;
  for (; i + 4 <= words; i += 4) {
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, bytes + 8 * (i + k), 8);
      lane[k] += (w ^ (w >> 29)) * kMul;
    }
  }
  uint64_t h = static_cast<uint64_t>(n) * kMul;
  for (int k = 0; k < 4; ++k) h = (h ^ lane[k]) * 0xFF51AFD7ED558CCDull;
  for (size_t b = 8 * i; b < n; ++b) h = (h ^ bytes[b]) * 0x100000001B3ull;
  return h ^ (h >> 33);
}

namespace {

std::string ranks_text(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  return os.str();
}

}  // namespace

std::string describe_replica_divergence(const std::vector<std::vector<int64_t>>& all,
                                        const std::vector<std::string>& names, int64_t last_good_forward,
                                        int my_rank) {
  // Ranks grouped by equal vectors, in order of their lowest rank.
  std::vector<std::vector<int>> groups;
  std::vector<size_t> group_of(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    size_t g = 0;
    while (g < groups.size() && all[groups[g].front()] != all[r]) ++g;
    if (g == groups.size()) groups.emplace_back();
    groups[g].push_back(static_cast<int>(r));
    group_of[r] = g;
  }
  if (groups.size() == 1) return "";
  std::ostringstream os;
  os << "DDP replica check (rank " << my_rank << "): ";
  const std::vector<int64_t>& mine = all[my_rank];
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r][0] != mine[0] || all[r][1] != mine[1]) {
      os << "ranks are at different points of training: rank " << my_rank << " is at synced forward #" << mine[0]
         << " with " << mine[1] << " parameters, rank " << r << " at #" << all[r][0] << " with " << all[r][1]
         << ". Every rank must run the same number of ddp.forward calls, on the same model.";
      return os.str();
    }
  }
  // The first parameter on which some rank differs from the first group.
  size_t first = 0;
  const std::vector<int64_t>& ref = all[groups[0].front()];
  for (size_t i = 2; i < ref.size() && first == 0; ++i) {
    for (size_t g = 1; g < groups.size() && first == 0; ++g) {
      if (all[groups[g].front()][i] != ref[i]) first = i;
    }
  }
  os << "the replicas' parameters differ at synced iteration " << mine[0] << " (they were equal at "
     << (last_good_forward == 0 ? std::string("construction") : "iteration " + std::to_string(last_good_forward))
     << "): ";
  for (size_t g = 0; g < groups.size(); ++g) {
    os << (g ? (g + 1 == groups.size() ? " and " : ", ") : "") << ranks_text(groups[g]);
  }
  os << " hold " << groups.size() << " different sets of parameters (this rank: "
     << ranks_text(groups[group_of[my_rank]]) << ")";
  if (first >= 2 && first - 2 < names.size()) os << "; the first that differs is '" << names[first - 2] << "'";
  os << ". DDP keeps replicas equal only when every rank runs ddp.forward and backward in every iteration "
        "with the same optimizer and hyper-parameters: look for no_sync() entered on some ranks only, a forward "
        "through the module itself instead of ddp.forward on some rank, a learning rate or other "
        "hyper-parameter that differs per rank, or parameters changed or loaded on some ranks only. "
        "(DDPOptions().check_replicas_every(0) or LOCKSTEP_REPLICA_CHECK_EVERY=0 turns the periodic check off.)";
  return os.str();
}

ReplicaCheck::ReplicaCheck(int64_t every, nn::NamedTensors params, std::function<void()> before_reading)
    : every_(every), params_(std::move(params)), before_reading_(std::move(before_reading)) {}

void ReplicaCheck::on_synced_forward(ProcessGroup& pg) {
  ++forwards_;  // counted with K = 0 too, for check_now's message
  if (every_ <= 0 || pg.size() == 1 || forwards_ % every_ != 0) return;
  compare(pg);
}

void ReplicaCheck::check_now(ProcessGroup& pg) {
  if (pg.size() > 1) compare(pg);
}

void ReplicaCheck::compare(ProcessGroup& pg) {
  if (before_reading_) before_reading_();
  NoGradGuard no_grad;
  std::vector<int64_t> mine = {forwards_, static_cast<int64_t>(params_.size())};
  std::vector<std::string> names;
  for (const auto& [name, p] : params_) {
    mine.push_back(static_cast<int64_t>(tensor_bytes_hash(p)));
    names.push_back(name);
  }
  // The optimizer's counts last (Note [Optimizer step check]).
  const OptimizerSteps steps = step_counter_ ? step_counter_() : OptimizerSteps{};
  mine.push_back(steps.steps);
  mine.push_back(steps.updates);
  const Device device = params_.empty() ? Device::cpu() : params_.front().second.device();
  Tensor input = tensor(mine).to(device);  // (2 + parameters + 2,) int64
  std::vector<Tensor> gathered;
  try {
    pg.allgather(gathered, input)->wait(pg.timeout());
  } catch (const std::exception& e) {
    throw ReplicaExchangeFailed(lockstep::detail::str(
        "DDP (rank ", pg.rank(), "): synced forward #", forwards_, ": the replica check's exchange with the "
        "other ranks failed (Note [Replica divergence check]): ", e.what(), ". A peer rank has probably died or stopped "
        "training; if it is only slow, raise LOCKSTEP_TIMEOUT_S (the timeout was ", pg.timeout().count(), " ms)"));
  }
  std::vector<std::vector<int64_t>> all;
  std::vector<OptimizerSteps> all_steps;
  for (const Tensor& t : gathered) {
    all.push_back(t.to(Device::cpu()).to_vector<int64_t>());
    all_steps.push_back({all.back()[all.back().size() - 2], all.back().back()});
    all.back().resize(all.back().size() - 2);
  }
  std::string error = describe_step_divergence(all_steps, forwards_, last_good_, pg.rank());
  if (error.empty()) error = describe_replica_divergence(all, names, last_good_, pg.rank());
  if (!error.empty()) throw Error(error);
  last_good_ = forwards_;
}

int64_t replica_check_every(int64_t option) {
  return env_int("LOCKSTEP_REPLICA_CHECK_EVERY", option, 0, 1'000'000'000,
                 "synced iterations between replica checks; 0 turns them off");
}

}  // namespace lockstep::distributed::detail
