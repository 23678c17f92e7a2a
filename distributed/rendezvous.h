// distributed/rendezvous.h — how ranks find each other: read who we are from
// the environment (or explicit options), connect the shared Store, and wait
// until every rank has arrived.
//
// Sources, highest priority first:
//   1. InitOptions set explicitly (.rank(r).world_size(n)...);
//   2. torchrun / lockstep-run variables: RANK, WORLD_SIZE, LOCAL_RANK,
//      MASTER_ADDR, MASTER_PORT;
//   3. mpirun (Open MPI) variables: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//      OMPI_COMM_WORLD_LOCAL_RANK;
//   4. MPICH / Intel MPI (PMI): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID;
//   5. Slurm's srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID.
// Each of rank, world size and local rank is the first of its variables that
// is set. MASTER_ADDR defaults to 127.0.0.1 (one machine) and MASTER_PORT to
// 29500; LOCAL_RANK defaults to the rank.
//
// § Note [Slurm and PMI]
// Under srun without MASTER_ADDR, the master is the first host of
// SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST), a compressed list like
// node[01-03,7] (distributed/slurm_hostlist.h): Slurm starts task 0 on the
// step's first node. Without MASTER_PORT, a Slurm job (SLURM_JOB_ID set) uses
// 29500 + SLURM_JOB_ID % 1000, so that jobs sharing a node rarely collide; set
// MASTER_PORT to choose. SLURM_NODEID and GROUP_RANK are not needed: ranks meet
// through the store. The PMI variables are those MPICH's and Intel MPI's
// mpiexec (Hydra) export; Open MPI's are read first, so mpirun inside a Slurm
// allocation takes its own ranks, not the allocation's. The timeout defaults to 300 s, or
// LOCKSTEP_TIMEOUT_S seconds when that is set. A missing or inconsistent value
// throws ls::Error naming the variable ("RANK=3 but WORLD_SIZE=2").
//
// rendezvous_from_env() then connects a TCPStore (rank 0 hosts the server),
// unless options supply a store, and runs barrier_on_store(..., "lockstep/
// rendezvous"), so it returns only once all ranks are there — or throws after
// the timeout listing the ranks that never arrived.
//
// § Note [torchrun's agent store]
// torchrun's agent hosts a PyTorch TCPStore at MASTER_ADDR:MASTER_PORT itself
// and says so with TORCHELASTIC_USE_AGENT_STORE=True (static rendezvous,
// --standalone, and c10d unless TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1). Then
// every rank, rank 0 included, joins it as a client (the protocol is PyTorch's,
// Note [TCPStore protocol]), and lockstep's keys go under
// "lockstep/torchelastic/<TORCHELASTIC_RUN_ID>/attempt_<TORCHELASTIC_RESTART_COUNT>/":
// the agent's store outlives the workers, so a restarted attempt must not
// meet the counters of the failed one, and the agent's own keys
// ("<run_id>/...", "torch.rendezvous.<run_id>.<round>/...") stay apart.
// Read before: distributed/store/store.h, distributed/store/tcp_store.h.
// Read next: distributed/init.h (init_process_group on top of this).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "distributed/store/store.h"

namespace lockstep::distributed {

class InitOptions {
 public:
  InitOptions rank(int r) const { auto o = *this; o.rank_ = r; return o; }
  InitOptions world_size(int n) const { auto o = *this; o.world_size_ = n; return o; }
  InitOptions local_rank(int r) const { auto o = *this; o.local_rank_ = r; return o; }
  InitOptions master_addr(std::string a) const { auto o = *this; o.master_addr_ = std::move(a); return o; }
  InitOptions master_port(int p) const { auto o = *this; o.master_port_ = p; return o; }
  InitOptions timeout(std::chrono::milliseconds t) const { auto o = *this; o.timeout_ = t; return o; }
  // Rendezvous through this store instead of a new TCPStore (MASTER_* are then unused).
  InitOptions store(std::shared_ptr<Store> s) const { auto o = *this; o.store_ = std::move(s); return o; }
  // init_process_group: K process groups used round-robin (the paper's Section 3.3
  // knob); the rendezvous itself ignores it. Default 1.
  InitOptions round_robin(int k) const { auto o = *this; o.round_robin_ = k; return o; }

  const std::optional<int>& rank() const { return rank_; }
  const std::optional<int>& world_size() const { return world_size_; }
  const std::optional<int>& local_rank() const { return local_rank_; }
  const std::optional<std::string>& master_addr() const { return master_addr_; }
  const std::optional<int>& master_port() const { return master_port_; }
  const std::optional<std::chrono::milliseconds>& timeout() const { return timeout_; }
  const std::shared_ptr<Store>& store() const { return store_; }
  int round_robin() const { return round_robin_; }

 private:
  std::optional<int> rank_, world_size_, local_rank_, master_port_;
  std::optional<std::string> master_addr_;
  std::optional<std::chrono::milliseconds> timeout_;
  std::shared_ptr<Store> store_;
  int round_robin_ = 1;
};

struct RendezvousInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  std::chrono::milliseconds timeout{300000};
  // Note [torchrun's agent store]: join torchrun's store; keys under this prefix.
  bool agent_store = false;
  std::string key_prefix;
  std::shared_ptr<Store> store;  // connected; every rank has passed the rendezvous barrier
};

// Where the ranks' identities come from, resolved but not yet connected.
// Throws naming the variable when one is missing, malformed or inconsistent.
RendezvousInfo resolve_rendezvous(const InitOptions& options = {});

// resolve_rendezvous + connect the store + barrier: the whole rendezvous.
RendezvousInfo rendezvous_from_env(const InitOptions& options = {});

// The world size a launcher announced — WORLD_SIZE (lockstep-run, torchrun), else
// OMPI_COMM_WORLD_SIZE (mpirun) — or nullopt when neither is set. Throws naming the
// variable when it is not a whole number >= 1 (WORLD_SIZE=abc), so every program
// refuses a malformed value the same way instead of reading it as 0.
std::optional<int> launched_world_size();

// Which attempt this is: TORCHELASTIC_RESTART_COUNT (set by torchrun and by
// lockstep-run, Note [Restarts] in tools/lockstep_run.cpp), 0 when unset or on
// the first attempt. Throws naming the variable when it is not an integer >= 0.
int restart_count();

// 300 s, or LOCKSTEP_TIMEOUT_S seconds (a positive number, at most 1e8) when set.
std::chrono::milliseconds default_timeout();

// Blocks until all world_size ranks have called it with the same `name` (as
// often as this rank has), or throws after `timeout` naming the ranks that
// have not arrived. Reusable: the k-th call with a name waits for everyone's
// k-th call. Rank 0 returns last (after every other rank has been released), so
// a rank 0 hosting a TCPStore may exit right after it. Keys used: "<name>/count",
// "<name>/rank/<r>", "<name>/done/<k>", "<name>/left/<k>", "<name>/left/<k>/all".
void barrier_on_store(Store& store, int rank, int world_size, std::chrono::milliseconds timeout,
                      const std::string& name = "lockstep/barrier");

}  // namespace lockstep::distributed
