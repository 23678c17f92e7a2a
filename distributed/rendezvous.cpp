// distributed/rendezvous.cpp — environment parsing, store connection and the
// store-based barrier of distributed/rendezvous.h.
// Read before: distributed/rendezvous.h.
#include "distributed/rendezvous.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "distributed/slurm_hostlist.h"
#include "distributed/store/prefix_store.h"
#include "distributed/store/tcp_store.h"

namespace lockstep::distributed {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

// An integer read from variable `name`; throws naming it when malformed.
int parse_int(const char* name, const char* text) {
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  LS_CHECK(errno == 0 && end != text && *end == '\0' && v >= INT32_MIN && v <= INT32_MAX,
           "rendezvous: ", name, "='", text, "' is not an integer; the launcher (lockstep-run, torchrun, "
           "mpirun) sets it: unset it or correct it");
  return static_cast<int>(v);
}

// The first of the given variables that is set: {value, its name}.
struct EnvValue {
  std::optional<int> value;
  std::string from;  // the variable's name, or "InitOptions"
};

EnvValue pick(const std::optional<int>& option, const char* option_name, std::initializer_list<const char*> vars) {
  if (option) return {option, std::string("InitOptions().") + option_name + "()"};
  for (const char* var : vars) {
    if (const char* text = env(var)) return {parse_int(var, text), var};
  }
  return {std::nullopt, ""};
}

// Note [Slurm and PMI]: the launchers' variables, in priority order.
constexpr std::initializer_list<const char*> kRankVars = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
constexpr std::initializer_list<const char*> kWorldVars = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                                           "SLURM_NTASKS"};
constexpr std::initializer_list<const char*> kLocalRankVars = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                                               "MPI_LOCALRANKID", "SLURM_LOCALID"};

const char* slurm_nodelist() {
  const char* step = env("SLURM_STEP_NODELIST");
  return step != nullptr ? step : env("SLURM_JOB_NODELIST");
}

// 29500; under Slurm (SLURM_JOB_ID set) 29500 + SLURM_JOB_ID % 1000, so that
// two jobs sharing a node do not pick the same port.
int default_master_port() {
  const char* job = env("SLURM_JOB_ID");
  if (job == nullptr) return 29500;
  const int id = parse_int("SLURM_JOB_ID", job);
  LS_CHECK(id >= 0, "rendezvous: SLURM_JOB_ID=", id, " must not be negative");
  return 29500 + id % 1000;
}

// Note [torchrun's agent store].
void resolve_agent_store(RendezvousInfo& info) {
  const char* use = env("TORCHELASTIC_USE_AGENT_STORE");
  if (use == nullptr) return;
  const std::string value = use;
  LS_CHECK(value == "True" || value == "False", "rendezvous: TORCHELASTIC_USE_AGENT_STORE='", value,
           "' is neither 'True' nor 'False' (torchrun sets it); unset it or correct it");
  if (value == "False") return;
  info.agent_store = true;
  const int attempt = restart_count();
  const char* run_id = env("TORCHELASTIC_RUN_ID");
  info.key_prefix = detail::str("lockstep/torchelastic/", run_id != nullptr ? run_id : "none", "/attempt_", attempt);
}

}  // namespace

int restart_count() {
  const char* restart = env("TORCHELASTIC_RESTART_COUNT");
  const int attempt = restart != nullptr ? parse_int("TORCHELASTIC_RESTART_COUNT", restart) : 0;
  LS_CHECK(attempt >= 0, "rendezvous: TORCHELASTIC_RESTART_COUNT=", attempt, " must not be negative");
  return attempt;
}

std::chrono::milliseconds default_timeout() {
  const char* text = env("LOCKSTEP_TIMEOUT_S");
  if (text == nullptr) return Store::kDefaultTimeout;
  char* end = nullptr;
  double s = std::strtod(text, &end);
  LS_CHECK(end != text && *end == '\0' && std::isfinite(s) && s > 0,
           "rendezvous: LOCKSTEP_TIMEOUT_S='", text, "' is not a positive number of seconds");
  // Larger values would overflow the milliseconds (and a deadline computed from them).
  constexpr double kMaxSeconds = 1e8;  // about 3 years; in nanoseconds far below int64's limit
  LS_CHECK(s <= kMaxSeconds, "rendezvous: LOCKSTEP_TIMEOUT_S='", text, "' is more than ", kMaxSeconds,
           " seconds; give a realistic timeout (the default is 300)");
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(s * 1000.0)));
}

RendezvousInfo resolve_rendezvous(const InitOptions& options) {
  RendezvousInfo info;
  EnvValue rank = pick(options.rank(), "rank", kRankVars);
  EnvValue world = pick(options.world_size(), "world_size", kWorldVars);
  LS_CHECK(rank.value.has_value(), "rendezvous: RANK is not set (nor OMPI_COMM_WORLD_RANK, PMI_RANK, "
           "SLURM_PROCID); start the program with lockstep-run (or torchrun / mpirun / srun), or pass "
           "InitOptions().rank(r)");
  LS_CHECK(world.value.has_value(), "rendezvous: WORLD_SIZE is not set (nor OMPI_COMM_WORLD_SIZE, PMI_SIZE, "
           "SLURM_NTASKS), but ", rank.from, "=", *rank.value, " is; start the program with lockstep-run (or "
           "torchrun / mpirun / srun), or pass InitOptions().world_size(n)");
  LS_CHECK(*world.value >= 1, "rendezvous: ", world.from, "=", *world.value, " must be at least 1");
  LS_CHECK(*rank.value >= 0 && *rank.value < *world.value, "rendezvous: ", rank.from, "=", *rank.value,
           " but ", world.from, "=", *world.value, "; the rank must be in [0, ", *world.value, ")");
  info.rank = *rank.value;
  info.world_size = *world.value;

  EnvValue local = pick(options.local_rank(), "local_rank", kLocalRankVars);
  info.local_rank = local.value.value_or(info.rank);
  LS_CHECK(info.local_rank >= 0 && info.local_rank <= info.rank, "rendezvous: ", local.from, "=",
           info.local_rank, " but ", rank.from, "=", info.rank,
           "; the local rank must be in [0, rank] (it counts ranks on this machine)");

  if (options.master_addr()) {
    info.master_addr = *options.master_addr();
  } else if (const char* a = env("MASTER_ADDR")) {
    info.master_addr = a;
  } else if (const char* list = slurm_nodelist()) {
    // Note [Slurm and PMI]: rank 0 of a step runs on the step's first node.
    info.master_addr = first_host(list, env("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST");
  } else {
    info.master_addr = "127.0.0.1";
  }
  LS_CHECK(!info.master_addr.empty(), "rendezvous: InitOptions().master_addr() is empty");
  EnvValue port = pick(options.master_port(), "master_port", {"MASTER_PORT"});
  info.master_port = port.value.value_or(default_master_port());
  LS_CHECK(info.master_port >= 1 && info.master_port <= 65535, "rendezvous: ", port.from, "=",
           info.master_port, " is not a TCP port (1..65535)");

  info.timeout = options.timeout() ? *options.timeout() : default_timeout();
  LS_CHECK(info.timeout.count() > 0, "rendezvous: the timeout must be positive, got ", info.timeout.count(), " ms");
  resolve_agent_store(info);
  info.store = options.store();
  return info;
}

std::optional<int> launched_world_size() {
  EnvValue world = pick(std::nullopt, "world_size", kWorldVars);
  LS_CHECK(!world.value || *world.value >= 1, "rendezvous: ", world.from, "=", *world.value, " must be at least 1");
  return world.value;
}

RendezvousInfo rendezvous_from_env(const InitOptions& options) {
  RendezvousInfo info = resolve_rendezvous(options);
  if (!info.store && info.agent_store) {
    // Note [torchrun's agent store]: every rank is a client of the agent's store.
    auto agent = std::make_shared<TCPStore>(info.master_addr, info.master_port, /*is_master=*/false, info.timeout);
    info.store = std::make_shared<PrefixStore>(info.key_prefix, agent);
  } else if (!info.store) {
    info.store = std::make_shared<TCPStore>(info.master_addr, info.master_port, /*is_master=*/info.rank == 0,
                                            info.timeout);
  }
  info.store->set_timeout(info.timeout);
  barrier_on_store(*info.store, info.rank, info.world_size, info.timeout, "lockstep/rendezvous");
  return info;
}

void barrier_on_store(Store& store, int rank, int world_size, std::chrono::milliseconds timeout,
                      const std::string& name) {
  LS_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "barrier_on_store('", name, "'): rank ", rank,
           " is not in [0, world_size=", world_size, ")");
  auto rank_key = [&](int r) { return name + "/rank/" + std::to_string(r); };
  // This rank's arrival number at this barrier (1 the first time), then the total.
  const int64_t generation = store.add(rank_key(rank), 1);
  const int64_t arrived = store.add(name + "/count", 1);
  const std::string done = name + "/done/" + std::to_string(generation);
  if (arrived == generation * world_size) store.set(done, std::string("1"));
  try {
    store.wait({done}, timeout);
  } catch (const Error& e) {
    std::vector<int> missing;
    try {
      for (int r = 0; r < world_size; ++r) {
        if (!store.check({rank_key(r)}) || std::stoll(store.get_string(rank_key(r))) < generation) {
          missing.push_back(r);
        }
      }
    } catch (const std::exception& asking) {
      throw Error(detail::str("barrier '", name, "' on rank ", rank, " failed: ", e.what(),
                              "; and the store could not be asked which ranks are missing: ", asking.what()));
    }
    if (missing.empty()) {  // the last rank arrived just as the timeout passed
      store.wait({done}, std::chrono::milliseconds(5000));
      return;
    }
    std::string list;
    for (size_t i = 0; i < missing.size(); ++i) list += (i ? ", " : "") + std::to_string(missing[i]);
    throw Error(detail::str("barrier '", name, "': rank ", rank, " waited ", timeout.count(), " ms but rank",
                            missing.size() == 1 ? " " : "s ", list, " (", missing.size(), " of ", world_size,
                            ") never arrived; they may have crashed, hung, or not been started — check "
                            "their output, and raise LOCKSTEP_TIMEOUT_S if they are just slow"));
  }
  // Rank 0 may host the store (TCPStore): it must not return — and perhaps exit,
  // taking the server down — while another rank still awaits the reply that
  // releases it. So every rank checks out, and rank 0 leaves last.
  const std::string left = name + "/left/" + std::to_string(generation);
  if (store.add(left, 1) == world_size) store.set(left + "/all", std::string("1"));
  if (rank == 0) store.wait({left + "/all"}, timeout);
}

}  // namespace lockstep::distributed
