// tests/distributed/test_process_group_mpi.cpp — the MPI backend, for real under
// mpirun: each CTest case launches `mpirun -np N` on this same test binary,
// asking it to run one of the (otherwise skipped) "mpi worker" test cases:
//  - every collective, dtype and op (tests/distributed/collective_suite.h) on
//    the MPI group and on a round-robin group of two MPI groups, async overlap,
//    and mismatches caught by the fingerprints (the first collective and, by
//    default, every later one, also deep inside a burst whose exchanges are posted
//    ahead) — at 2 and 4 ranks;
//  - a rank killed mid-sequence: mpirun ends the whole job, naming the rank and
//    the signal, well within the bound (coreutils `timeout` around mpirun);
//  - a peer that never joins: Work::wait(timeout) throws an error naming the
//    collective, and the group still works once the peer arrives;
//  - DDP over MPI (buckets, buffer broadcast, the iteration fingerprint) ends
//    with the parameters of local training on the whole batch.
// Workers that must order themselves across ranks without MPI (the MPI thread
// is busy in the collective under test) use marker files in the directory the
// parent passes as LOCKSTEP_TEST_SYNC_DIR.
// Read before: distributed/process_group/process_group_mpi.h, tests/distributed/collective_suite.h.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/factory.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/init.h"
#include "distributed/process_group/process_group_mpi.h"
#include "distributed/process_group/process_group_round_robin.h"
#include "optim/sgd.h"
#include "tests/distributed/collective_suite.h"
#include "tests/distributed/collective_test_util.h"
#include "tests/distributed/ddp_test_models.h"
#include "tests/support/errors.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using dist::ReduceOp;
using ls::testing::check_reduced;
using ls::testing::rank_input;

namespace {

using lockstep::testing::contains;

// Runs `command` through the shell; returns (exit status, stdout+stderr).
std::pair<int, std::string> run_command(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  REQUIRE_MESSAGE(pipe != nullptr, "popen failed for: " << command);
  std::array<char, 4096> buf{};
  while (size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// Exit status of coreutils `timeout` when it had to stop the command.
constexpr int kTimedOut = 124;

// Runs the worker test cases matching `worker` under `mpirun -np`, bounded by
// `bound_s` seconds, with a fresh marker directory. Returns (exit status, output).
// `mca`: mpirun's MCA options.
std::pair<int, std::string> run_mpi_workers(int np, const std::string& worker, int bound_s,
                                            const std::string& mca = "--mca mpi_yield_when_idle 1") {
  char exe[4096] = {0};
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  REQUIRE(n > 0);
  char dir_template[] = "/tmp/lockstep_mpi_test_XXXXXX";
  REQUIRE(::mkdtemp(dir_template) != nullptr);
  // `timeout` ends mpirun (by its PID) if the job outlives the bound;
  // yield_when_idle keeps oversubscribed ranks from spinning on the shared cores.
  const std::string command = "timeout " + std::to_string(bound_s) +
                              " mpirun --allow-run-as-root --oversubscribe " + mca + " -np " +
                              std::to_string(np) + " -x LOCKSTEP_TEST_SYNC_DIR=" + dir_template + " " + exe +
                              " --no-skip --test-case='" + worker + "'";
  auto result = run_command(command);
  fs::remove_all(dir_template);
  result.second = command + "\n" + result.second;
  return result;
}

// Marker files between the ranks of one mpirun job.
fs::path marker(const std::string& name) {
  const char* dir = std::getenv("LOCKSTEP_TEST_SYNC_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "run the mpi workers through the process_group: mpi test cases");
  return fs::path(dir) / name;
}
void touch(const std::string& name) { std::ofstream(marker(name)) << "1"; }
// Polls for the marker (at most `limit`); false if it never appeared.
bool wait_for(const std::string& name, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!fs::exists(marker(name))) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

}  // namespace

// Skipped in ordinary runs (CTest does not even list them); the test cases below run them under mpirun.
TEST_CASE("mpi worker: every collective and dtype and op" * doctest::skip()) {
  REQUIRE_MESSAGE(dist::ProcessGroupMPI::launched_by_mpirun(), "run this test case under mpirun");
  auto pg = dist::init_process_group("mpi");
  const int rank = pg->rank(), world = pg->size();
  CHECK(pg->backend_name() == "mpi");
  // The first collective carries the fingerprint check: a size mismatch names the rank
  // (rank 0 sees rank 1's 4 elements first; the others see rank 0's 3).
  ls::Tensor odd = ls::ones({rank == 0 ? 3 : 4});
  std::string msg;
  try {
    pg->allreduce(odd)->wait(30s);
  } catch (const std::exception& e) {
    msg = e.what();
  }
  const std::string expected = rank == 0 ? "rank 1 issued allreduce #0 of 4 float32" : "rank 0 issued allreduce #0 of 3 float32";
  CHECK_MESSAGE(contains(msg, expected), msg);
  // Every later collective is checked too (Note [Collective fingerprints], on by default):
  // SUM on rank 0 against MAX elsewhere is an error naming the op, not a wrong sum.
  pg->barrier()->wait(30s);
  ls::Tensor same = ls::ones({8});
  std::string op_msg;
  try {
    pg->allreduce(same, rank == 0 ? dist::ReduceOp::SUM : dist::ReduceOp::MAX)->wait(30s);
  } catch (const std::exception& e) {
    op_msg = e.what();
  }
  CHECK_MESSAGE(contains(op_msg, "(reduce op differ)"), op_msg);

  // A burst of 200 issued back to back spans several exchanges, each posted ahead of the
  // data (Note [Fingerprints exchanged ahead over MPI]): an op and a size that differ on the
  // last rank deep inside it fail only their own collectives, before their data moves; every
  // other one reduces right, and the group goes on.
  {
    pg->barrier()->wait(30s);
    const bool odd = rank == world - 1;
    std::vector<ls::Tensor> burst;
    std::vector<std::shared_ptr<dist::Work>> works;
    for (int k = 0; k < 200; ++k) {
      burst.push_back(rank_input(rank, (k == 170 && odd) ? 9 : 1 + k % 23, k % 2 ? ls::kFloat64 : ls::kFloat32));
      works.push_back(pg->allreduce(burst.back(), (k == 130 && odd) ? ReduceOp::MAX : ReduceOp::SUM));
    }
    for (int k = 0; k < 200; ++k) {
      std::string err;
      try {
        works[k]->wait(30s);
      } catch (const std::exception& e) {
        err = e.what();
      }
      if (k == 130) {
        CHECK_MESSAGE(contains(err, "(reduce op differ)"), err);
      } else if (k == 170) {
        CHECK_MESSAGE(contains(err, "(number of elements differ)"), err);
      } else {
        CHECK_MESSAGE(err.empty(), "burst collective ", k, ": ", err);
        check_reduced(burst[k], ReduceOp::SUM, world, "mpi burst");
      }
    }
  }

  ls::testing::check_every_collective(*pg, "mpi", 30s);

  // Async: rank 1 issues its allreduce only after rank 0 has seen its own still
  // pending (and computed meanwhile), so the collective cannot have completed yet.
  ls::Tensor t = rank_input(rank, 1000, ls::kFloat32);
  if (rank == 1) REQUIRE(wait_for("rank0_checked", 30s));
  auto work = pg->allreduce(t);
  if (rank == 0) {
    CHECK_FALSE(work->is_completed());
    ls::Tensor busy = ls::ones({64, 64}).matmul(ls::ones({64, 64}));  // the caller keeps computing
    CHECK(busy.sum().item<float>() == 64.0f * 64 * 64);
    CHECK_FALSE(work->is_completed());
    touch("rank0_checked");
  }
  work->wait(30s);
  check_reduced(t, ReduceOp::SUM, world, "mpi async allreduce");

  // Round robin over two more MPI groups: the same list, calls alternating.
  auto rr = dist::init_process_group("mpi", dist::InitOptions().round_robin(2));
  REQUIRE(dynamic_cast<dist::ProcessGroupRoundRobin*>(rr.get()) != nullptr);
  ls::testing::check_every_collective(*rr, "round_robin(2 x mpi)", 30s);
  std::printf("mpi worker: rank %d of %d ok\n", rank, world);
  std::fflush(stdout);
}

TEST_CASE("mpi worker: a rank killed mid-sequence" * doctest::skip()) {
  auto pg = dist::init_process_group("mpi");
  ls::Tensor t = rank_input(pg->rank(), 100, ls::kFloat32);
  pg->allreduce(t)->wait(30s);  // #0 succeeds everywhere
  std::printf("mpi worker: rank %d passed allreduce #0\n", pg->rank());
  std::fflush(stdout);
  if (pg->rank() == 1) raise(SIGKILL);
  // The others block in allreduce #1 until mpirun ends the job; waiting longer
  // than the parent's bound shows that it was mpirun, not this wait, that ended it.
  pg->allreduce(t)->wait(300s);
  std::printf("mpi worker: rank %d was not stopped\n", pg->rank());
}

TEST_CASE("mpi worker: a peer that never joins" * doctest::skip()) {
  auto pg = dist::init_process_group("mpi");
  const int rank = pg->rank(), world = pg->size();
  ls::Tensor warm = ls::ones({4});
  pg->allreduce(warm)->wait(30s);  // #0
  ls::Tensor t = rank_input(rank, 10, ls::kFloat64);
  if (rank == 0) {
    auto work = pg->allreduce(t);  // #1: rank 1 has not issued it
    std::string msg;
    try {
      work->wait(1000ms);
    } catch (const std::exception& e) {
      msg = e.what();
    }
    CHECK_MESSAGE(contains(msg, "allreduce #1 of 10 float64"), msg);
    CHECK_MESSAGE(contains(msg, "(mpi, rank 0)"), msg);
    CHECK_MESSAGE(contains(msg, "did not complete within 1000 ms"), msg);
    CHECK_FALSE(work->is_completed());
    touch("rank0_timed_out");
    // The caller's wait timed out, not the collective: it completes once the peer joins.
    work->wait(30s);
  } else {
    REQUIRE(wait_for("rank0_timed_out", 30s));
    pg->allreduce(t)->wait(30s);
  }
  check_reduced(t, ReduceOp::SUM, world, "allreduce after a late peer");
  std::printf("mpi worker: rank %d of %d ok\n", rank, world);
  std::fflush(stdout);
}

TEST_CASE("mpi worker: ddp matches local training" * doctest::skip()) {
  auto pg = dist::init_process_group("mpi");
  const int rank = pg->rank(), world = pg->size();
  constexpr int kSteps = 3;
  constexpr int64_t kPerRank = 4;
  auto [x, y] = ls::testing::image_data(kSteps * world * kPerRank, 77);
  auto chunk = [&](const ls::Tensor& t, int64_t c) { return t.narrow(0, c * kPerRank, kPerRank); };
  // Local reference from seed 0: each step averages the chunks of all ranks.
  ls::manual_seed(0);
  auto local = std::make_shared<ls::testing::TinyCNN>();
  ls::optim::SGD local_opt(local->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < world; ++r) {
      const int64_t c = step * world + r;
      (ls::cross_entropy(local->forward(chunk(x, c)), chunk(y, c)) / static_cast<double>(world)).backward();
    }
    local_opt.step();
    local_opt.zero_grad();
  }
  ls::manual_seed(rank == 0 ? 0 : 500 + rank);  // DDP's initial broadcast must equalize them
  auto model = std::make_shared<ls::testing::TinyCNN>();
  dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().bucket_cap_mb(0));
  ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < kSteps; ++step) {
    const int64_t c = step * world + rank;
    ls::cross_entropy(ddp.forward(chunk(x, c)), chunk(y, c)).backward();
    opt.step();
    opt.zero_grad();
  }
  const double diff = ls::testing::max_abs_diff(model->parameters(), ls::testing::clone_all(local->parameters()));
  CHECK_MESSAGE(diff < 2e-5, "max |ddp over mpi - local| = " << diff);
  std::printf("mpi worker: rank %d of %d ok\n", rank, world);
  std::fflush(stdout);
}

// Note [The MPI thread yields while it waits]: what Open MPI itself reports (its MPI_T
// control variable), with the launcher's value in LOCKSTEP_TEST_EXPECT_YIELD.
TEST_CASE("mpi worker: the progress loop yields" * doctest::skip()) {
  auto pg = dist::init_process_group("mpi");
  const std::optional<bool> yields = dist::ProcessGroupMPI::yields_when_idle();
  REQUIRE_MESSAGE(yields.has_value(), "this MPI has no mpi_yield_when_idle control variable (not Open MPI?)");
  const char* expect = std::getenv("LOCKSTEP_TEST_EXPECT_YIELD");
  REQUIRE(expect != nullptr);
  CHECK(static_cast<int>(*yields) == std::atoi(expect));
  std::printf("mpi worker: rank %d yield %d\n", pg->rank(), static_cast<int>(*yields));
  std::fflush(stdout);
}

namespace {
void every_collective_under_mpirun(int np) {
  auto [status, output] = run_mpi_workers(np, "mpi worker: every collective*", 240);
  CHECK_MESSAGE(status == 0, output);
  for (int r = 0; r < np; ++r) {
    CHECK_MESSAGE(contains(output, "mpi worker: rank " + std::to_string(r) + " of " + std::to_string(np) + " ok"),
                  output);
  }
}
}  // namespace

TEST_CASE("process_group: mpi backend under mpirun -np 2 runs every collective and dtype") {
  every_collective_under_mpirun(2);
}

TEST_CASE("process_group: mpi backend under mpirun -np 4 runs every collective and dtype") {
  every_collective_under_mpirun(4);
}

TEST_CASE("process_group: mpi a killed rank makes mpirun end the job naming the rank and signal") {
  // The survivors wait up to 300 s in their collective; the 60 s bound passes
  // only if mpirun ends them on its own when rank 1 dies.
  auto [status, output] = run_mpi_workers(3, "mpi worker: a rank killed*", 60);
  CHECK_MESSAGE(status != kTimedOut, "mpirun did not end the job within 60 s\n" << output);
  CHECK_MESSAGE(status == 128 + SIGKILL, output);
  CHECK_MESSAGE(contains(output, "mpi worker: rank 1 passed allreduce #0"), output);
  CHECK_MESSAGE(contains(output, "process rank 1"), output);
  CHECK_MESSAGE(contains(output, "exited on signal 9"), output);
  CHECK_MESSAGE(!contains(output, "was not stopped"), output);
}

TEST_CASE("process_group: mpi Work::wait times out naming the collective when a peer never joins") {
  auto [status, output] = run_mpi_workers(2, "mpi worker: a peer that never joins*", 120);
  CHECK_MESSAGE(status == 0, output);
  CHECK_MESSAGE(contains(output, "mpi worker: rank 0 of 2 ok"), output);
  CHECK_MESSAGE(contains(output, "mpi worker: rank 1 of 2 ok"), output);
}

TEST_CASE("process_group: mpi backend carries DDP training equal to local training under mpirun -np 2") {
  auto [status, output] = run_mpi_workers(2, "mpi worker: ddp matches*", 120);
  CHECK_MESSAGE(status == 0, output);
  CHECK_MESSAGE(contains(output, "mpi worker: rank 0 of 2 ok"), output);
  CHECK_MESSAGE(contains(output, "mpi worker: rank 1 of 2 ok"), output);
}

TEST_CASE("process_group: mpi the MPI thread yields while it waits, unless mpirun is told otherwise") {
  // 2 ranks on this machine's cores are not oversubscribed, so Open MPI's own default is no yield.
  for (const auto& [mca, expect] : {std::pair<std::string, int>{"", 1}, {"--mca mpi_yield_when_idle 0", 0}}) {
    auto [status, output] = run_mpi_workers(2, "mpi worker: the progress loop yields*", 120,
                                            mca + " -x LOCKSTEP_TEST_EXPECT_YIELD=" + std::to_string(expect));
    CHECK_MESSAGE(status == 0, output);
    CHECK_MESSAGE(contains(output, "mpi worker: rank 0 yield " + std::to_string(expect)), output);
    CHECK_MESSAGE(contains(output, "mpi worker: rank 1 yield " + std::to_string(expect)), output);
  }
}
