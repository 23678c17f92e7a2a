// tests/distributed/test_rendezvous.cpp — who-am-I from the environment
// (torchrun, Open MPI, PMI and Slurm variables, explicit InitOptions winning),
// Slurm host lists, torchrun's agent store, errors that name the offending variable, and the store barrier naming missing ranks.
// Read before: distributed/rendezvous.h, tests/support/multiprocess.h.
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "distributed/store/hash_store.h"
#include "distributed/rendezvous.h"
#include "distributed/slurm_hostlist.h"
#include "distributed/store/tcp_store.h"
#include "tests/support/errors.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;

namespace {

// Clears every variable rendezvous reads, sets the given ones, restores all at scope exit.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::string>& vars) {
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                             "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                             "LOCKSTEP_TIMEOUT_S", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "SLURM_PROCID",
                             "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                             "SLURM_JOB_ID", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT",
                             "TORCHELASTIC_RUN_ID"}) {
      const char* v = std::getenv(name);
      saved_[name] = v ? std::optional<std::string>(v) : std::nullopt;
      ::unsetenv(name);
    }
    for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) {
      if (v) ::setenv(k.c_str(), v->c_str(), 1);
      else ::unsetenv(k.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// The message resolve_rendezvous(o) throws, or "(no error)".
std::string rendezvous_error(const dist::InitOptions& o = {}) {
  return ls::testing::error_of([&] { dist::resolve_rendezvous(o); });
}

}  // namespace

TEST_CASE("rendezvous: reads torchrun variables") {
  ScopedEnv env({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "10.1.2.3"},
                 {"MASTER_PORT", "1234"}});
  dist::RendezvousInfo info = dist::resolve_rendezvous();
  CHECK(info.rank == 2);
  CHECK(info.world_size == 4);
  CHECK(info.local_rank == 0);
  CHECK(info.master_addr == "10.1.2.3");
  CHECK(info.master_port == 1234);
  CHECK(info.timeout == 300000ms);
}

TEST_CASE("rendezvous: reads mpirun variables, with local defaults for the master") {
  ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  dist::RendezvousInfo info = dist::resolve_rendezvous();
  CHECK(info.rank == 1);
  CHECK(info.world_size == 3);
  CHECK(info.local_rank == 1);
  CHECK(info.master_addr == "127.0.0.1");
  CHECK(info.master_port == 29500);
}

TEST_CASE("rendezvous: torchrun variables win over mpirun's, explicit options over both") {
  ScopedEnv env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "0"},
                 {"OMPI_COMM_WORLD_SIZE", "5"}, {"MASTER_PORT", "4000"}, {"LOCKSTEP_TIMEOUT_S", "2.5"}});
  dist::RendezvousInfo a = dist::resolve_rendezvous();
  CHECK(a.rank == 1);
  CHECK(a.world_size == 2);
  CHECK(a.local_rank == 1);  // LOCAL_RANK unset: the rank
  CHECK(a.timeout == 2500ms);
  auto store = std::make_shared<dist::HashStore>();
  dist::RendezvousInfo b = dist::resolve_rendezvous(dist::InitOptions()
                                                        .rank(3)
                                                        .world_size(8)
                                                        .local_rank(1)
                                                        .master_addr("example.org")
                                                        .master_port(5555)
                                                        .timeout(1500ms)
                                                        .store(store));
  CHECK(b.rank == 3);
  CHECK(b.world_size == 8);
  CHECK(b.local_rank == 1);
  CHECK(b.master_addr == "example.org");
  CHECK(b.master_port == 5555);
  CHECK(b.timeout == 1500ms);
  CHECK(b.store == store);
}

TEST_CASE("rendezvous: missing or inconsistent values name the variable") {
  {
    ScopedEnv env({});
    CHECK(rendezvous_error().find("RANK is not set") != std::string::npos);
    CHECK(rendezvous_error(dist::InitOptions().rank(0)).find("WORLD_SIZE is not set") != std::string::npos);
  }
  {
    ScopedEnv env({{"RANK", "3"}, {"WORLD_SIZE", "2"}});
    CHECK(rendezvous_error().find("RANK=3 but WORLD_SIZE=2") != std::string::npos);
  }
  {
    ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
    CHECK(rendezvous_error().find("OMPI_COMM_WORLD_RANK=4 but OMPI_COMM_WORLD_SIZE=4") != std::string::npos);
  }
  {
    ScopedEnv env({{"RANK", "zero"}, {"WORLD_SIZE", "2"}});
    CHECK(rendezvous_error().find("RANK='zero' is not an integer") != std::string::npos);
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "0"}});
    CHECK(rendezvous_error().find("WORLD_SIZE=0") != std::string::npos);
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}});
    CHECK(rendezvous_error().find("MASTER_PORT=70000") != std::string::npos);
  }
  {
    ScopedEnv env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "-1"}});
    CHECK(rendezvous_error().find("LOCAL_RANK=-1") != std::string::npos);
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCKSTEP_TIMEOUT_S", "soon"}});
    CHECK(rendezvous_error().find("LOCKSTEP_TIMEOUT_S='soon'") != std::string::npos);
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
    CHECK(rendezvous_error(dist::InitOptions().rank(2)).find("InitOptions().rank()=2 but WORLD_SIZE=2") !=
          std::string::npos);
  }
}

TEST_CASE("rendezvous: ranks meet through a TCPStore hosted by rank 0") {
  ls::testing::run_ranks(3, [](int rank) {
    dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(10000ms));
    CHECK(info.rank == rank);
    CHECK(info.world_size == 3);
    REQUIRE(info.store != nullptr);
    auto* tcp = dynamic_cast<dist::TCPStore*>(info.store.get());
    REQUIRE(tcp != nullptr);
    CHECK(tcp->is_master() == (rank == 0));
    info.store->set("hello/" + std::to_string(rank), std::to_string(rank * rank));
    CHECK(info.store->get_string("hello/" + std::to_string((rank + 1) % 3)) ==
          std::to_string(((rank + 1) % 3) * ((rank + 1) % 3)));
    // The barrier is reusable; after it everyone's key is visible.
    for (int round = 0; round < 3; ++round) {
      info.store->add("round/" + std::to_string(round), 1);
      dist::barrier_on_store(*info.store, rank, 3, 10000ms, "test/barrier");
      CHECK(info.store->get_string("round/" + std::to_string(round)) == "3");
    }
    dist::barrier_on_store(*info.store, rank, 3, 10000ms, "test/final");  // rank 0's server outlives the reads
  });
}

TEST_CASE("rendezvous: a barrier that times out lists the ranks that never arrived") {
  dist::HashStore store;
  std::string errors[2];
  std::thread t0([&] {
    try {
      dist::barrier_on_store(store, 0, 4, 300ms, "partial");
    } catch (const ls::Error& e) {
      errors[0] = e.what();
    }
  });
  try {
    dist::barrier_on_store(store, 2, 4, 300ms, "partial");
  } catch (const ls::Error& e) {
    errors[1] = e.what();
  }
  t0.join();
  for (const auto& msg : errors) {
    CHECK(msg.find("ranks 1, 3 (2 of 4) never arrived") != std::string::npos);
    CHECK(msg.find("'partial'") != std::string::npos);
  }
}

TEST_CASE("rendezvous: a rank that never starts makes the others fail naming it") {
  auto results = ls::testing::launch_ranks(3, [](int rank) {
    if (rank == 2) return;  // "crashes" before the rendezvous
    // Our own TCPStore, so that rank 0 can keep the server up until rank 1 has
    // asked it which ranks are missing.
    int port = std::stoi(std::getenv("MASTER_PORT"));
    auto store = std::make_shared<dist::TCPStore>("127.0.0.1", port, rank == 0, 10000ms);
    try {
      dist::rendezvous_from_env(dist::InitOptions().timeout(1000ms).store(store));
      FAIL("rendezvous should have timed out");
    } catch (const ls::Error& e) {
      std::string msg = e.what();
      CHECK_MESSAGE(msg.find("rank 2 (1 of 3) never arrived") != std::string::npos, msg);
    }
    if (rank == 1) store->set("reported", std::string("1"));
    if (rank == 0) store->wait({"reported"}, 10000ms);
  });
  for (const auto& r : results) CHECK_MESSAGE(r.ok(), r.describe());
}

TEST_CASE("rendezvous: Slurm host lists expand as scontrol show hostnames does") {
  using V = std::vector<std::string>;
  CHECK(dist::expand_hostlist("node[01-03,7],gpu5", "L") == V{"node01", "node02", "node03", "node7", "gpu5"});
  CHECK(dist::expand_hostlist("r[1-2]n[1-2]", "L") == V{"r1n1", "r1n2", "r2n1", "r2n2"});
  CHECK(dist::expand_hostlist("c[08-10]", "L") == V{"c08", "c09", "c10"});
  CHECK(dist::expand_hostlist("solo", "L") == V{"solo"});
  CHECK(dist::expand_hostlist("a-1,b[2],c", "L") == V{"a-1", "b2", "c"});
  CHECK(dist::first_host("node[0001-9999999],x", "L") == "node0001");  // not expanded
  CHECK(dist::first_host("gpu[7,2]", "L") == "gpu7");
  for (const char* bad : {"node[01-", "node]", "node[a-b]", "node[3-1]", "a,,b", "n[[1]]", "n[]", ""}) {
    const std::string e = ls::testing::error_of([&] { dist::expand_hostlist(bad, "SLURM_JOB_NODELIST"); });
    CHECK_MESSAGE(e.find("SLURM_JOB_NODELIST") != std::string::npos, bad, ": ", e);
  }
  CHECK(ls::testing::error_of([] { dist::expand_hostlist("n[1-100]", "L", 50); }).find("more than 50") !=
        std::string::npos);
}

TEST_CASE("rendezvous: reads srun variables, the master from the step's node list, a per-job port") {
  ScopedEnv env({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"},
                 {"SLURM_STEP_NODELIST", "node[07-09]"}, {"SLURM_JOB_NODELIST", "other[1-9]"},
                 {"SLURM_JOB_ID", "12345"}});
  auto info = dist::resolve_rendezvous();
  CHECK(info.rank == 1);
  CHECK(info.world_size == 4);
  CHECK(info.local_rank == 1);
  CHECK(info.master_addr == "node07");
  CHECK(info.master_port == 29500 + 345);
  ::unsetenv("SLURM_STEP_NODELIST");
  CHECK(dist::resolve_rendezvous().master_addr == "other1");
  ::setenv("MASTER_ADDR", "10.0.0.1", 1);
  ::setenv("MASTER_PORT", "4000", 1);
  info = dist::resolve_rendezvous();
  CHECK(info.master_addr == "10.0.0.1");
  CHECK(info.master_port == 4000);
}

TEST_CASE("rendezvous: reads PMI variables (MPICH, Intel MPI), torchrun's and Open MPI's win") {
  {
    ScopedEnv env({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "0"}});
    auto info = dist::resolve_rendezvous();
    CHECK(info.rank == 2);
    CHECK(info.world_size == 3);
    CHECK(info.local_rank == 0);
    CHECK(info.master_addr == "127.0.0.1");
    CHECK(info.master_port == 29500);
  }
  ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"SLURM_PROCID", "5"},
                 {"SLURM_NTASKS", "8"}, {"PMI_RANK", "3"}, {"PMI_SIZE", "4"}});
  auto info = dist::resolve_rendezvous();
  CHECK(info.rank == 0);
  CHECK(info.world_size == 2);
}

TEST_CASE("rendezvous: malformed Slurm, PMI and torchrun variables name the variable") {
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {{{"PMI_RANK", "x"}, {"PMI_SIZE", "2"}}, "PMI_RANK='x'"},
      {{{"PMI_RANK", "0"}, {"PMI_SIZE", "0"}}, "PMI_SIZE=0"},
      {{{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}}, "SLURM_PROCID=4"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "-1"}}, "SLURM_LOCALID"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "abc"}}, "SLURM_JOB_ID='abc'"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n[1-"}}, "SLURM_JOB_NODELIST='n[1-'"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NODELIST", "n[x]"}}, "SLURM_STEP_NODELIST"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_USE_AGENT_STORE", "yes"}}, "TORCHELASTIC_USE_AGENT_STORE='yes'"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"},
        {"TORCHELASTIC_RESTART_COUNT", "one"}}, "TORCHELASTIC_RESTART_COUNT='one'"},
  };
  for (const auto& [vars, expected] : cases) {
    ScopedEnv env(vars);
    const std::string e = rendezvous_error();
    CHECK_MESSAGE(e.find(expected) != std::string::npos, expected, " -> ", e);
  }
}

TEST_CASE("rendezvous: under torchrun every rank joins the agent's store, keys under the run and attempt") {
  // The "agent": a store already serving MASTER_PORT. Rank 0 hosting its own
  // server there would fail (the port is taken): it must join as a client.
  dist::TCPStore agent("127.0.0.1", 0, /*is_master=*/true, 10000ms);
  ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", std::to_string(agent.port())},
                 {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RUN_ID", "job7"},
                 {"TORCHELASTIC_RESTART_COUNT", "2"}});
  auto info = dist::rendezvous_from_env();
  CHECK(info.agent_store);
  CHECK(info.key_prefix == "lockstep/torchelastic/job7/attempt_2");
  CHECK(agent.check({"lockstep/torchelastic/job7/attempt_2/lockstep/rendezvous/count"}));
  info.store->set("mine", std::string("x"));
  CHECK(agent.get_string("lockstep/torchelastic/job7/attempt_2/mine") == "x");
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1);
  CHECK(!dist::resolve_rendezvous().agent_store);
}
