// distributed/ddp/ddp_join.cpp — the join status exchange, the shadow loop of a
// rank that has run out of inputs, and the final model sync.
// Read before: distributed/ddp/ddp_join.h (Note [Join: shadowing the collectives]).
#include "distributed/ddp/ddp_join.h"

#include <sstream>

#include "core/grad_mode.h"
#include "core/native/native.h"
#include "distributed/ddp/distributed_data_parallel.h"

namespace lockstep::distributed::detail {

namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t k = 0; k < ranks.size(); ++k) os << (k ? ", " : "") << ranks[k];
  return os.str();
}

}  // namespace

JoinRound JoinState::forward_round(bool synced, bool arms, bool rebuild) {
  return exchange(/*active=*/true, synced, arms, rebuild);
}

JoinRound JoinState::exchange(bool active, bool synced, bool arms, bool rebuild) {
  ProcessGroup& pg = core_.process_group();
  const int world = pg.size(), rank = pg.rank();
  Tensor status = native::zeros({3 + world}, kInt64);  // (3 + world): [synced, arms, rebuild, training per rank]
  int64_t* v = status.data_ptr<int64_t>();
  if (active) {
    v[0] = synced;
    v[1] = arms;
    v[2] = rebuild;
    v[3 + rank] = 1;
  }
  try {
    pg.allreduce(status, ReduceOp::SUM)->wait(pg.timeout());
  } catch (const std::exception& e) {
    throw Error(lockstep::detail::str("DDP join (rank ", rank, "): the join status exchange failed: ", e.what(),
                                      ". A peer rank has probably died, stopped training without joining, or "
                                      "called join() a different number of times; if it is only slow, raise "
                                      "LOCKSTEP_TIMEOUT_S"));
  }
  v = status.data_ptr<int64_t>();
  JoinRound round;
  for (int r = 0; r < world; ++r) {
    if (v[3 + r] == 1) round.active.push_back(r);
  }
  const int64_t n = static_cast<int64_t>(round.active.size());
  const char* flags[] = {"is synced (no_sync)", "arms the reducer (grad mode)", "rebuilds the buckets"};
  for (int f = 0; f < 3; ++f) {
    LS_CHECK(v[f] == 0 || v[f] == n, "DDP join (rank ", rank, "): the ", n, " ranks still training disagree on "
             "whether this forward ", flags[f], ": ", v[f], " say yes. Every rank must run the same kind of "
             "forward in the same order");
  }
  round.synced = v[0] > 0;
  round.arms = v[1] > 0;
  round.rebuild = v[2] > 0;
  if (n == 0) return round;
  last_active_ = round.active;
  if (n < world && options_.throw_on_early_termination()) {
    std::vector<int> joined;
    for (int r = 0; r < world; ++r) {
      if (v[3 + r] == 0) joined.push_back(r);
    }
    throw Error(lockstep::detail::str("DDP join (rank ", rank, "): ", rank_list(joined), " ran out of inputs "
                                      "while ", rank_list(round.active), " still had some; with "
                                      "JoinOptions().throw_on_early_termination(true) every rank stops here"));
  }
  core_.reducer().set_divisor(options_.divide_by_initial_world_size() ? world : static_cast<double>(n));
  return round;
}

void JoinState::shadow_until_all_joined() {
  Reducer& reducer = core_.reducer();
  for (;;) {
    const JoinRound round = exchange(/*active=*/false, false, false, false);
    if (round.active.empty()) break;  // every rank has joined
    if (!round.synced) continue;      // a no_sync forward: no collectives follow
    // The same decisions as DDPCore::pre_forward on the training ranks.
    const nn::NamedTensors buffers = core_.synced_buffers();
    if (!round.arms && buffers.empty()) continue;
    reducer.shadow_synced_forward(core_.forward_exchanges_fingerprint(buffers, round.arms, round.rebuild));
    if (round.rebuild) reducer.rebuild_buckets(round.source());
    if (!buffers.empty()) core_.broadcast_from(buffers, round.source(), "module buffers");
    if (round.arms) reducer.shadow_backward();
  }
  sync_final_model();
}

void JoinState::sync_final_model() {
  if (last_active_.empty()) return;  // nobody trained inside join(): nothing diverged
  // The joined ranks skipped optimizer steps; the last rank to join has them all.
  const int source = last_active_.back();
  nn::NamedTensors state = core_.module().named_parameters();
  for (auto& entry : core_.module().named_buffers()) state.push_back(entry);
  core_.broadcast_from(state, source, "final parameters and buffers (end of join)");
  for (const auto& [name, t] : state) t.bump_version();
}

JoinScope::JoinScope(DDPCore& core, const JoinOptions& options) : core_(core) {
  LS_CHECK(core_.join() == nullptr, "DDP (rank ", core_.process_group().rank(), "): join() called inside join(); "
           "nest training loops inside one join() instead");
  LS_CHECK(!core_.reducer().has_plugin(), "DDP (rank ", core_.process_group().rank(), "): join() "
           "with a ZeroRedundancyOptimizer overlapped with DDP (hook_with_zero_step) is not supported: a joined "
           "rank would not step its shard nor broadcast it; use ZeroOptions().overlap_with_ddp(false) under join()");
  core_.set_join(std::make_unique<JoinState>(core_, options));
}

JoinScope::~JoinScope() {
  core_.set_join(nullptr);
  core_.reducer().set_divisor(static_cast<double>(core_.process_group().size()));
}

void JoinScope::finish() { core_.join()->shadow_until_all_joined(); }

}  // namespace lockstep::distributed::detail
