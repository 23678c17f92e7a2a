// tests/distributed/test_ddp_beyond_mpi.cpp — DDP's features beyond the paper
// over the MPI backend, for real under mpirun: the CTest case launches
// `mpirun -np 2` on this test binary, asking it to run the (otherwise skipped)
// worker, which trains a model registered out of execution order with
// gradient_as_bucket_view and the bucket rebuild, then with the fp16 and the
// full-rank PowerSGD hooks, then with uneven inputs under join(), and compares
// each with local training (the Gloo tests of each feature: test_ddp_bucket_view,
// test_ddp_rebuild, test_ddp_comm_hooks, test_ddp_join).
// Read before: tests/distributed/test_process_group_mpi.cpp (the same launch scheme).
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <functional>
#include <string>

#include "tests/distributed/ddp_beyond_util.h"
#include "tests/support/errors.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
namespace hooks = lockstep::distributed::comm_hooks;
using Model = ls::testing::ReorderedMLP;

namespace {

constexpr int64_t kPerRank = 4;
constexpr int kSteps = 4;

using lockstep::testing::contains;

// Trains Model for up to kSteps steps (rank r runs batches[r] of them, inside
// join()); returns the parameters. `setup` may register a hook.
std::vector<ls::Tensor> train(std::shared_ptr<dist::ProcessGroup> pg, const ls::Tensor& x, const ls::Tensor& y,
                              dist::DDPOptions options, const std::vector<int>& batches,
                              const std::function<void(dist::DistributedDataParallel<Model>&)>& setup) {
  const int world = pg->size(), rank = pg->rank();
  ls::manual_seed(rank == 0 ? 0 : 50 + rank);  // the construction broadcast equalises them
  auto model = std::make_shared<Model>();
  dist::DistributedDataParallel ddp(model, pg, options);
  if (setup) setup(ddp);
  ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
  ddp.join([&] {
    for (int step = 0; step < batches[rank]; ++step) {
      const int64_t chunk = step * world + rank;
      ls::cross_entropy(ddp.forward(ls::testing::chunk_rows(x, chunk, kPerRank)),
                        ls::testing::chunk_rows(y, chunk, kPerRank)).backward();
      opt.step();
      opt.zero_grad();
    }
  });
  CHECK(ddp.reducer().has_rebuilt_buckets() == options.rebuild_buckets());
  ls::testing::check_same_on_all_ranks(model->parameters(), *pg);
  return ls::testing::clone_all(model->parameters());
}

// The same steps in one process (the world's chunks, divided by the world size).
std::vector<ls::Tensor> train_locally(int world, const ls::Tensor& x, const ls::Tensor& y,
                                      const std::vector<int>& batches) {
  ls::manual_seed(0);
  auto local = std::make_shared<Model>();
  ls::optim::SGD opt(local->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < world; ++r) {
      if (step >= batches[r]) continue;
      const int64_t chunk = step * world + r;
      (ls::cross_entropy(local->forward(ls::testing::chunk_rows(x, chunk, kPerRank)),
                         ls::testing::chunk_rows(y, chunk, kPerRank)) / static_cast<double>(world)).backward();
    }
    opt.step();
    opt.zero_grad();
  }
  return ls::testing::clone_all(local->parameters());
}

}  // namespace

TEST_CASE("mpi worker: ddp bucket views, rebuild, comm hooks and join" * doctest::skip()) {
  auto pg = dist::init_process_group("mpi");
  const int rank = pg->rank(), world = pg->size();
  ls::manual_seed(31);
  ls::Tensor x = ls::randn({kSteps * world * kPerRank, 6}), y = ls::randint(0, 3, {kSteps * world * kPerRank});
  const std::vector<int> even(world, kSteps);
  std::vector<int> uneven(world, kSteps);
  uneven[0] = 2;
  const auto base = dist::DDPOptions().bucket_cap_mb(0);
  const auto expected = train_locally(world, x, y, even);
  auto check = [&](const char* what, const std::vector<ls::Tensor>& got, const std::vector<ls::Tensor>& want,
                   double tolerance) {
    const double diff = ls::testing::max_abs_diff(got, want);
    CHECK_MESSAGE(diff < tolerance, what << ": max |ddp over mpi - local| = " << diff);
  };
  check("bucket views + rebuild", train(pg, x, y, dist::DDPOptions(base).gradient_as_bucket_view(true), even, nullptr),
        expected, 2e-5);
  check("fp16 hook", train(pg, x, y, base, even, [&](auto& ddp) { ddp.register_comm_hook(pg, hooks::fp16_compress_hook); }),
        expected, 2e-3);
  auto state = std::make_shared<hooks::PowerSGDState>(
      pg, hooks::PowerSGDOptions().matrix_approximation_rank(64).start_powersgd_iter(0).min_compression_rate(0));
  check("full-rank PowerSGD",
        train(pg, x, y, base, even, [&](auto& ddp) { ddp.register_comm_hook(state, hooks::powersgd_hook); }),
        expected, 2e-5);
  CHECK(state->compressed_buckets() > 0);
  check("join, rank 0 with 2 batches", train(pg, x, y, base, uneven, nullptr), train_locally(world, x, y, uneven), 2e-5);
  std::printf("mpi worker: rank %d of %d ok\n", rank, world);
  std::fflush(stdout);
}

TEST_CASE("ddp beyond: bucket views, rebuild, comm hooks and join over mpi under mpirun -np 2") {
  char exe[4096] = {0};
  REQUIRE(::readlink("/proc/self/exe", exe, sizeof(exe) - 1) > 0);
  const std::string command = std::string("timeout 120 mpirun --allow-run-as-root --oversubscribe --mca "
                                          "mpi_yield_when_idle 1 -np 2 ") + exe +
                              " --no-skip --test-case='mpi worker: ddp bucket views*' 2>&1";
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buf{};
  while (size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) output.append(buf.data(), n);
  const int status = ::pclose(pipe);
  INFO(command << "\n" << output);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(contains(output, "mpi worker: rank 0 of 2 ok"));
  CHECK(contains(output, "mpi worker: rank 1 of 2 ok"));
}
