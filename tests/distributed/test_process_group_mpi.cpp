// tests/distributed/test_process_group_mpi.cpp — the MPI backend, for real under
// mpirun: the CTest case launches `mpirun -np 2` on this same test binary,
// asking it to run the (otherwise skipped) "mpi worker" test case, which checks
// every collective, dtype and op on both ranks, round-robin over two MPI
// groups, and a mismatch caught by the first-collective fingerprint.
// Read before: distributed/process_group_mpi.h, tests/distributed/collective_test_util.h.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/factory.h"
#include "distributed/init.h"
#include "distributed/process_group_mpi.h"
#include "distributed/process_group_round_robin.h"
#include "tests/distributed/collective_test_util.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;
using dist::ReduceOp;
using ls::testing::check_reduced;
using ls::testing::rank_input;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

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

}  // namespace

// Skipped in ordinary runs (CTest does not even list it); the test below runs it under mpirun.
TEST_CASE("mpi worker: every collective and dtype and op" * doctest::skip()) {
  REQUIRE_MESSAGE(dist::ProcessGroupMPI::launched_by_mpirun(), "run this test case under mpirun");
  auto pg = dist::init_process_group("mpi");
  const int rank = pg->rank(), world = pg->size();
  CHECK(pg->backend_name() == "mpi");
  // The first collective carries the fingerprint check: a size mismatch names the rank.
  ls::Tensor odd = ls::ones({rank == 0 ? 3 : 4});
  std::string msg;
  try {
    pg->allreduce(odd)->wait(30s);
  } catch (const std::exception& e) {
    msg = e.what();
  }
  CHECK_MESSAGE(contains(msg, "rank " + std::to_string(1 - rank) + " issued allreduce #0"), msg);

  for (ls::ScalarType dtype : ls::testing::reducible_dtypes()) {
    for (ReduceOp op : ls::testing::all_reduce_ops()) {
      ls::Tensor t = rank_input(rank, 7, dtype);
      pg->allreduce(t, op)->wait(30s);
      check_reduced(t, op, world, "mpi allreduce");
      std::vector<ls::Tensor> inputs;
      for (int j = 0; j < world; ++j) inputs.push_back(rank_input(rank, 3, dtype, 3 * j));
      ls::Tensor out = ls::empty({3}, ls::TensorOptions().dtype(dtype));
      pg->reduce_scatter(out, inputs, op)->wait(30s);
      check_reduced(out, op, world, "mpi reduce_scatter", 3 * rank);
    }
  }
  for (int root = 0; root < world; ++root) {
    ls::Tensor t = rank_input(rank, 5, ls::kFloat16);
    pg->broadcast(t, root)->wait(30s);
    CHECK(t.to(ls::kFloat64).to_vector<double>() == rank_input(root, 5, ls::kFloat64).to_vector<double>());
  }
  std::vector<ls::Tensor> outputs;
  pg->allgather(outputs, rank_input(rank, 3, ls::kInt64))->wait(30s);
  REQUIRE(static_cast<int>(outputs.size()) == world);
  for (int r = 0; r < world; ++r) CHECK(outputs[r].to_vector<int64_t>() == rank_input(r, 3, ls::kInt64).to_vector<int64_t>());
  ls::Tensor msg_t = rank_input(rank, 6, ls::kFloat32), got = ls::zeros({6});
  if (rank == 0) {
    pg->send(msg_t, 1, 3)->wait(30s);
    pg->recv(got, 1, 3)->wait(30s);
  } else if (rank == 1) {
    pg->recv(got, 0, 3)->wait(30s);
    pg->send(msg_t, 0, 3)->wait(30s);
  }
  if (rank < 2) CHECK(got.to_vector<float>() == rank_input(1 - rank, 6, ls::kFloat32).to_vector<float>());
  pg->barrier()->wait(30s);

  // Round robin over two more MPI groups: interleaved, all in flight.
  std::vector<std::shared_ptr<dist::ProcessGroup>> groups = {dist::ProcessGroupMPI::create(),
                                                             dist::ProcessGroupMPI::create()};
  dist::ProcessGroupRoundRobin rr(groups);
  std::vector<ls::Tensor> ts;
  std::vector<std::shared_ptr<dist::Work>> works;
  for (int i = 0; i < 10; ++i) {
    ts.push_back(rank_input(rank, 3 + i, ls::kFloat64, i));
    works.push_back(rr.allreduce(ts.back()));
  }
  for (int i = 0; i < 10; ++i) {
    works[i]->wait(30s);
    check_reduced(ts[i], ReduceOp::SUM, world, "mpi round robin", i);
  }
  std::printf("mpi worker: rank %d of %d ok\n", rank, world);
  std::fflush(stdout);
}

TEST_CASE("process_group: mpi backend under mpirun -np 2 runs every collective and dtype") {
  char exe[4096] = {0};
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  REQUIRE(n > 0);
  // `timeout` bounds the whole run (it ends mpirun by its PID if it hangs).
  const std::string command = std::string("timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 ") +
                              exe + " --no-skip --test-case='mpi worker: *'";
  auto [status, output] = run_command(command);
  CHECK_MESSAGE(status == 0, command << "\n" << output);
  CHECK_MESSAGE(contains(output, "mpi worker: rank 0 of 2 ok"), output);
  CHECK_MESSAGE(contains(output, "mpi worker: rank 1 of 2 ok"), output);
}
