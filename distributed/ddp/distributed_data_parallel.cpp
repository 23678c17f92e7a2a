// distributed/ddp/distributed_data_parallel.cpp — construction checks, initial
// broadcast, the forward's fingerprint check, the bucket rebuild, buffer
// broadcast, the periodic replica check, arming the reducer.
// Read before: distributed/ddp/distributed_data_parallel.h.
#include "distributed/ddp/distributed_data_parallel.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/factory.h"
#include "core/grad_mode.h"
#include "distributed/ddp/coalesced_broadcast.h"

namespace lockstep::distributed::detail {

namespace {

// One line per parameter: "name dtype [shape]".
std::vector<std::string> describe(const nn::NamedTensors& params) {
  std::vector<std::string> out;
  for (const auto& [name, t] : params) {
    std::ostringstream os;
    os << name << ' ' << t.dtype() << ' ' << t.shape_str();
    out.push_back(os.str());
  }
  return out;
}

int64_t fnv1a(const std::vector<std::string>& lines) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& line : lines) {
    for (unsigned char c : line + "\n") h = (h ^ c) * 1099511628211ull;
  }
  return static_cast<int64_t>(h);
}

// Sends rank 0's description to everyone (length, then bytes as int64).
std::vector<std::string> rank0_description(ProcessGroup& pg, const std::vector<std::string>& mine) {
  std::string joined;
  for (const auto& l : mine) joined += l + "\n";
  Tensor length = tensor(std::vector<int64_t>{static_cast<int64_t>(joined.size())});
  pg.broadcast(length, 0)->wait(pg.timeout());
  std::vector<int64_t> bytes(static_cast<size_t>(length.item<int64_t>()));
  if (pg.rank() == 0) std::copy(joined.begin(), joined.end(), bytes.begin());
  Tensor payload = tensor(bytes);
  if (!bytes.empty()) pg.broadcast(payload, 0)->wait(pg.timeout());
  std::vector<std::string> lines;
  std::string cur;
  for (int64_t b : payload.to_vector<int64_t>()) {
    if (b == '\n') {
      lines.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(b));
    }
  }
  return lines;
}

// § Note [DDP construction check]
// Construction's first collective is the parameter check's allgather. A rank
// that never constructs DDP (one that crashed, or took another branch) makes it
// time out, and the allgather alone cannot say who is missing. So before it
// each rank sets "lockstep/ddp_construct/<n>/<rank>" in the group's store (n
// counts DDP constructions in the process, the same on every rank); a failed
// check lists the ranks whose key is absent.
std::atomic<int64_t> next_construction{0};

std::string construction_failure(ProcessGroup& pg, Store* store, const std::string& prefix, const std::string& why) {
  std::ostringstream os;
  os << "DistributedDataParallel (rank " << pg.rank() << "): the construction check (an allgather of every "
     << "rank's parameter fingerprint, made when each rank constructs DDP) did not complete within "
     << pg.timeout().count() << " ms: ";
  std::vector<int> missing;
  std::string asking;
  try {
    for (int r = 0; store != nullptr && r < pg.size(); ++r) {
      if (!store->check({prefix + std::to_string(r)})) missing.push_back(r);
    }
  } catch (const std::exception& e) {
    asking = e.what();
  }
  if (store == nullptr || !asking.empty()) {
    os << "some rank did not construct DistributedDataParallel (which one cannot be told: "
       << (store == nullptr ? std::string("the process group has no store") : "the store failed: " + asking) << ")";
  } else if (missing.empty()) {
    os << "every rank began constructing DistributedDataParallel, but the exchange failed";
  } else {
    os << "rank" << (missing.size() == 1 ? "" : "s");
    for (size_t i = 0; i < missing.size(); ++i) os << (i ? ", " : " ") << missing[i];
    os << " (" << missing.size() << " of " << pg.size() << ") did not construct DistributedDataParallel";
  }
  os << ". Every rank must construct DDP, with the same model, at the same point of the program; check the "
        "other ranks' output (one may have failed or taken another branch). (" << why << ")";
  return os.str();
}

// Every rank must hold the same parameters; see the header.
void verify_same_parameters(ProcessGroup& pg, const nn::NamedTensors& params) {
  std::vector<std::string> mine = describe(params);
  Tensor fingerprint = tensor(std::vector<int64_t>{static_cast<int64_t>(mine.size()), fnv1a(mine)});
  std::vector<Tensor> all;
  const std::string prefix = lockstep::detail::str("lockstep/ddp_construct/", next_construction++, "/");
  std::shared_ptr<Store> store = pg.store();
  try {
    if (store) store->set(prefix + std::to_string(pg.rank()), std::string("1"));
  } catch (const std::exception&) {
    store.reset();  // the check below still runs; only its error cannot name the ranks
  }
  try {
    pg.allgather(all, fingerprint)->wait(pg.timeout());
  } catch (const Error& e) {
    throw Error(construction_failure(pg, store.get(), prefix, e.what()));
  }
  std::vector<int> differing;
  std::vector<int64_t> reference = all.at(0).to_vector<int64_t>();
  for (int r = 1; r < pg.size(); ++r) {
    if (all.at(r).to_vector<int64_t>() != reference) differing.push_back(r);
  }
  if (differing.empty()) return;
  std::vector<std::string> theirs = rank0_description(pg, mine);
  std::ostringstream os;
  os << "DistributedDataParallel (rank " << pg.rank() << "): ";
  if (fnv1a(theirs) != fnv1a(mine)) {
    size_t n = std::min(theirs.size(), mine.size());
    size_t k = 0;
    while (k < n && theirs[k] == mine[k]) ++k;
    if (k < n) {
      os << "parameter " << k << " is '" << mine[k] << "' here but '" << theirs[k] << "' on rank 0";
    } else {
      os << "this rank has " << mine.size() << " parameters but rank 0 has " << theirs.size();
    }
  } else {
    os << "rank(s)";
    for (int r : differing) os << ' ' << r;
    os << " hold different parameters from rank 0 (their errors name the first difference)";
  }
  os << ". Every rank must build the same model before wrapping it in DDP.";
  throw Error(os.str());
}

}  // namespace

DDPCore::DDPCore(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> process_group,
                 const DDPOptions& options)
    : module_(std::move(module)), process_group_(std::move(process_group)), options_(options) {
  LS_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  LS_CHECK(process_group_ != nullptr, "DistributedDataParallel: the process group is null");
  nn::Module& module_ref = *module_;
  ProcessGroup& pg = *process_group_;
  nn::NamedTensors trainable;
  for (auto& [name, p] : module_ref.named_parameters()) {
    if (p.requires_grad()) trainable.emplace_back(name, p);
  }
  LS_CHECK(!trainable.empty(), "DistributedDataParallel: the module has no parameter that "
                               "requires grad; there is nothing to synchronise");
  verify_same_parameters(pg, trainable);
  {
    // Same starting point everywhere (paper Section 3.2.1).
    // Coalesced by dtype: Note [Coalesced buffer broadcast] (coalesced_broadcast.h).
    NoGradGuard no_grad;
    std::vector<Tensor> state;
    for (auto& [name, p] : module_ref.named_parameters()) state.push_back(p);
    for (auto& [name, b] : module_ref.named_buffers()) state.push_back(b);
    broadcast_coalesced(pg, state, 0, pg.timeout());
    for (auto& [name, p] : module_ref.named_parameters()) p.bump_version();
  }
  std::vector<Tensor> params;
  std::vector<std::string> names;
  for (auto& [name, p] : trainable) {
    params.push_back(p);
    names.push_back(name);
  }
  if (options_.autotune_buckets()) {
    // Note [Bucket autotuning]: measure on this group, replace the two sizes.
    int64_t gradient_bytes = 0;
    for (const Tensor& p : params) gradient_bytes += static_cast<int64_t>(p.nbytes());
    bucket_choice_ = autotune_buckets(pg, gradient_bytes, 3, params.empty() ? Device::cpu() : params.front().device());
    options_.bucket_cap_mb(bucket_choice_->bucket_cap_mb).first_bucket_mb(bucket_choice_->first_bucket_mb);
    if (pg.rank() == 0) std::fprintf(stderr, "%s\n", bucket_choice_->describe().c_str());
  }
  // The progress board is on by default, on the group's own store (null for a
  // group without one, which leaves it off): Note [Progress board].
  // LOCKSTEP_PROGRESS_BOARD=0 turns it off without a code change.
  if (const char* env = std::getenv("LOCKSTEP_PROGRESS_BOARD")) {
    const std::string value = env;
    LS_CHECK(value == "0" || value == "1", "DistributedDataParallel: LOCKSTEP_PROGRESS_BOARD='", value,
             "' must be 0 (no progress board) or 1 (the default); unset it for the default");
    if (value == "0") options_.progress_board(false);
  }
  if (options_.progress_board() && !options_.progress_store()) options_.progress_store(pg.store());
  LS_CHECK(options_.check_replicas_every() >= 0, "DistributedDataParallel: check_replicas_every(",
           options_.check_replicas_every(), ") must be >= 0 (0 turns the replica check off)");
  options_.check_replicas_every(replica_check_every(options_.check_replicas_every()));
  // The check reads every parameter outside a forward, as state_dict() does:
  // their writers' hooks run first (Note [Forward pre-hooks], nn/module.h).
  replica_check_ = std::make_unique<ReplicaCheck>(options_.check_replicas_every(), trainable,
                                                  [m = module_.get()] { m->run_state_dict_pre_hooks(); });
  reducer_ = std::make_unique<Reducer>(std::move(params), std::move(names), process_group_, options_);
}

DDPCore::~DDPCore() = default;

nn::NamedTensors DDPCore::synced_buffers() const {
  return options_.broadcast_buffers() && process_group_->size() > 1 ? module_->named_buffers() : nn::NamedTensors{};
}

bool DDPCore::forward_exchanges_fingerprint(const nn::NamedTensors& buffers, bool arms, bool rebuild) const {
  return !buffers.empty() || (arms && reducer_->forward_issues_collective()) || rebuild;
}

void DDPCore::broadcast_from(const nn::NamedTensors& tensors, int source, const char* what) {
  // A few flat collectives, not one per tensor: Note [Coalesced buffer broadcast].
  std::vector<Tensor> targets;
  for (const auto& [name, t] : tensors) targets.push_back(t);
  try {
    broadcast_coalesced(*process_group_, targets, source, process_group_->timeout());
  } catch (const std::exception& e) {
    throw Error(lockstep::detail::str("DDP (rank ", process_group_->rank(), "): the broadcast of the ", what,
                                      " from rank ", source, " failed: ", e.what(), ". A peer rank has probably "
                                      "died or stopped training; if it is only slow, raise LOCKSTEP_TIMEOUT_S"));
  }
}

void DDPCore::pre_forward() {
  reducer_->check_previous_reduction_finished();
  const bool arms = require_sync_ && GradMode::is_enabled();
  // Note [Bucket rebuild from the traced order] (reducer_rebuild.cpp).
  const bool rebuild = arms && reducer_->should_rebuild_buckets();
  int source = 0;  // buffers and the traced bucket order come from rank 0 ...
  if (join_) {
    // ... or, inside join(), from the lowest rank still training
    // (Note [Join: shadowing the collectives], ddp_join.h).
    source = join_->forward_round(require_sync_, arms, rebuild).source();
  }
  if (!require_sync_) return;
  // A synced forward arms the reducer (grad mode on) or broadcasts buffers; when
  // it issues collectives (buffers, the unused-parameter bitmap, the bucket
  // rebuild) the ranks first compare fingerprints (Note [DDP iteration fingerprint]).
  auto buffers = synced_buffers();
  if (!arms && buffers.empty()) return;
  reducer_->begin_synced_forward(forward_exchanges_fingerprint(buffers, arms, rebuild));
  if (rebuild) reducer_->rebuild_buckets(source);
  if (!buffers.empty()) broadcast_from(buffers, source, "module buffers");
  // Joined ranks only mirror the training ranks' collectives (ddp_join.h): no extra ones inside join().
  if (arms && !join_) {
    try {
      replica_check_->on_synced_forward(*process_group_);
    } catch (const ReplicaExchangeFailed& e) {
      throw Error(e.what() + ("." + reducer_->where_others_are_after_backward()));
    }
  }
}

void DDPCore::check_replicas() {
  LS_CHECK(!join_, "DDP (rank ", process_group_->rank(), "): check_replicas() inside join(): the joined ranks "
           "only mirror the training ranks' collectives; call it after join() returns");
  try {
    replica_check_->check_now(*process_group_);
  } catch (const ReplicaExchangeFailed& e) {
    throw Error(e.what() + ("." + reducer_->where_others_are_after_backward()));
  }
}

void DDPCore::post_forward(const std::vector<Tensor>& outputs) {
  if (require_sync_ && GradMode::is_enabled()) reducer_->prepare_for_backward(outputs);
}

}  // namespace lockstep::distributed::detail
