// tests/distributed/test_process_group_failures.cpp — what users get when things
// go wrong or slow: async overlap (the caller returns before a collective
// completes), a killed rank and a hung rank (errors naming the collective within
// the timeout), mismatched collectives (an error naming the rank), and bad
// arguments (clear errors at the call).
// Read before: distributed/process_group/process_group_gloo.h,
// distributed/process_group/collective_check.h.
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "core/factory.h"
#include "distributed/store/hash_store.h"
#include "distributed/init.h"
#include "distributed/store/prefix_store.h"
#include "distributed/process_group/process_group_gloo.h"
#include "tests/distributed/collective_test_util.h"
#include "tests/support/errors.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;
using dist::ReduceOp;
using ls::testing::check_reduced;
using ls::testing::rank_input;

namespace {

using lockstep::testing::error_of;

using lockstep::testing::contains;

}  // namespace

TEST_CASE("process_group: allreduce returns before a late peer joins and then completes") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s));
    ls::Tensor t = rank_input(rank, 1000, ls::kFloat32);
    if (rank == 1) std::this_thread::sleep_for(300ms);  // the peer is late
    auto work = pg->allreduce(t);
    if (rank == 0) {
      // Rank 1 has not issued its allreduce yet, so ours cannot have finished:
      // allreduce() returned without waiting for it.
      CHECK_FALSE(work->is_completed());
      ls::Tensor busy = ls::ones({64, 64}).matmul(ls::ones({64, 64}));  // the caller keeps computing
      CHECK(busy.sum().item<float>() == 64.0f * 64 * 64);
    }
    work->wait(20s);
    CHECK(work->is_success());
    check_reduced(t, ReduceOp::SUM, 2, "late-peer allreduce");
  }, 60s);
}

TEST_CASE("process_group: a killed rank makes the others fail with an error naming the collective") {
  auto results = ls::testing::launch_ranks(3, [](int rank) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(3s));
    ls::Tensor t = rank_input(rank, 100, ls::kFloat32);
    pg->allreduce(t)->wait(10s);  // #0 succeeds everywhere
    if (rank == 2) raise(SIGKILL);  // dies mid-sequence
    std::string msg = error_of([&] { pg->allreduce(t)->wait(10s); });
    CHECK_MESSAGE(contains(msg, "gloo allreduce #1"), msg);
    // The group is now broken: the next collective fails at once, naming the first failure.
    std::string next = error_of([&] { pg->barrier()->wait(10s); });
    CHECK_MESSAGE(contains(next, "unusable after an earlier failure"), next);
    CHECK_MESSAGE(contains(next, "allreduce #1"), next);
  }, 60s);
  REQUIRE(results.size() == 3);
  CHECK(results[2].signal == SIGKILL);
  CHECK_MESSAGE(results[0].ok(), results[0].describe());
  CHECK_MESSAGE(results[1].ok(), results[1].describe());
}

TEST_CASE("process_group: a rank that stops issuing collectives is caught by the timeout") {
  auto results = ls::testing::launch_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(10s));
    ls::Tensor t = ls::ones({10});
    pg->allreduce(t)->wait(10s);
    if (rank == 1) {
      std::this_thread::sleep_for(3s);  // alive, but silent past rank 0's timeout
      return;
    }
    pg->set_timeout(1000ms);
    std::string msg = error_of([&] { pg->allreduce(t)->wait(10s); });
    CHECK_MESSAGE(contains(msg, "gloo allreduce #1"), msg);
    CHECK_MESSAGE(contains(msg, "timeout 1000 ms"), msg);
  }, 60s);
  CHECK_MESSAGE(results[0].ok(), results[0].describe());
}

TEST_CASE("process_group: mismatched sizes on the first collective raise an error naming the rank") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(10s));
    ls::Tensor t = ls::ones({rank == 0 ? 10 : 20});
    std::string msg = error_of([&] { pg->allreduce(t)->wait(10s); });
    const int other = 1 - rank;
    CHECK_MESSAGE(contains(msg, "rank " + std::to_string(other) + " issued allreduce #0 of " +
                                    std::to_string(other == 0 ? 10 : 20) + " float32"), msg);
    CHECK_MESSAGE(contains(msg, "number of elements"), msg);
    // The group refuses further work, repeating the mismatch.
    std::string next = error_of([&] { pg->barrier()->wait(10s); });
    CHECK_MESSAGE(contains(next, "unusable after an earlier failure"), next);
    CHECK_MESSAGE(contains(next, "mismatched collectives"), next);
  }, 60s);
}

TEST_CASE("process_group: a size mismatch in a chunked allreduce stops every piece on every rank") {
  ls::testing::run_ranks(2, [](int rank) {
    dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(10s));
    dist::ProcessGroupGloo::Options options;
    options.timeout = 10s;
    options.chunk_bytes = 1024;  // 256 floats a piece: 4 pieces on rank 0, 3 on rank 1
    dist::ProcessGroupGloo pg(info.store, info.rank, info.world_size, options);
    ls::Tensor t = ls::ones({rank == 0 ? 1000 : 700});
    std::string msg = error_of([&] { pg.allreduce(t)->wait(10s); });  // well within the timeout
    CHECK_MESSAGE(contains(msg, "issued allreduce #0 of " + std::to_string(rank == 0 ? 700 : 1000)), msg);
  }, 60s);
}

TEST_CASE("process_group: LOCKSTEP_DISTRIBUTED_DEBUG checks every collective (dtype and op and kind)") {
  ls::testing::run_ranks(2, [](int rank) {
    setenv("LOCKSTEP_DISTRIBUTED_DEBUG", "1", 1);
    dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(10s));
    // One fresh group per case: a mismatch leaves its group unusable.
    int group = 0;
    auto second_collective_error = [&](const std::function<std::shared_ptr<dist::Work>(dist::ProcessGroup&)>& issue) {
      auto store = std::make_shared<dist::PrefixStore>("debug" + std::to_string(group++), info.store);
      dist::ProcessGroupGloo pg(store, info.rank, info.world_size);
      ls::Tensor t = ls::ones({8});
      pg.allreduce(t)->wait(10s);  // #0 agrees
      return error_of([&] { issue(pg)->wait(10s); });
    };
    ls::Tensor t = ls::ones({8});
    std::string op_msg = second_collective_error([&](dist::ProcessGroup& pg) {
      return pg.allreduce(t, rank == 0 ? ReduceOp::SUM : ReduceOp::MAX);
    });
    CHECK_MESSAGE(contains(op_msg, "reduce op"), op_msg);
    CHECK_MESSAGE(contains(op_msg, "rank " + std::to_string(1 - rank) + " issued allreduce #1"), op_msg);
    ls::Tensor u = ls::ones({8}, ls::TensorOptions().dtype(rank == 0 ? ls::kFloat32 : ls::kFloat64));
    std::string dtype_msg = second_collective_error([&](dist::ProcessGroup& pg) { return pg.allreduce(u); });
    CHECK_MESSAGE(contains(dtype_msg, "dtype"), dtype_msg);
    std::string kind_msg = second_collective_error([&](dist::ProcessGroup& pg) {
      return rank == 0 ? pg.barrier() : pg.broadcast(t, 0);
    });
    CHECK_MESSAGE(contains(kind_msg, "collective"), kind_msg);
    CHECK_MESSAGE(contains(kind_msg, rank == 0 ? "issued broadcast #1" : "issued barrier #1"), kind_msg);
  }, 60s);
}

TEST_CASE("process_group: bad arguments raise clear errors at the call (world of 1)") {
  auto store = std::make_shared<dist::HashStore>();
  dist::ProcessGroupGloo pg(store, 0, 1);
  CHECK(pg.backend_name() == "gloo");
  ls::Tensor m = ls::ones({3, 4});
  ls::Tensor transposed = m.t();
  CHECK(contains(error_of([&] { pg.allreduce(transposed); }), "not contiguous"));
  ls::Tensor ints = ls::ones({3}, ls::TensorOptions().dtype(ls::kInt32));
  std::string int_msg = error_of([&] { pg.allreduce(ints); });
  CHECK_MESSAGE(contains(int_msg, "cannot reduce a int32 tensor"), int_msg);
  CHECK(contains(error_of([&] { pg.broadcast(m, 1); }), "root 1 is out of range"));
  std::vector<ls::Tensor> outs = {ls::ones({12}), ls::ones({12})};
  CHECK(contains(error_of([&] { pg.allgather(outs, m); }), "outputs holds 2 tensors"));
  std::vector<ls::Tensor> wrong = {ls::ones({5})};
  ls::Tensor out = ls::ones({3});
  CHECK(contains(error_of([&] { pg.reduce_scatter(out, wrong); }), "inputs[0]"));
  CHECK(contains(error_of([&] { pg.send(m, 0); }), "cannot send to itself"));
  ls::Tensor undefined;
  CHECK(contains(error_of([&] { pg.allreduce(undefined); }), "undefined"));
  // A world of one still runs every collective (AVG divides by 1).
  ls::Tensor t = rank_input(0, 5, ls::kBFloat16);
  pg.allreduce(t, ReduceOp::AVG)->wait(5s);
  check_reduced(t, ReduceOp::AVG, 1, "allreduce in a world of 1");
}

TEST_CASE("process_group: init_process_group names the valid backends") {
  if (!ls::cuda::is_available()) {  // with a GPU, "nccl" is valid (tests/cuda/test_cuda_ddp.cpp)
    std::string nccl = error_of([] { dist::init_process_group("nccl"); });
    CHECK_MESSAGE(contains(nccl, "backend 'nccl' needs lockstep built with CUDA"), nccl);
  }
  std::string unknown = error_of([] { dist::init_process_group("glooo"); });
  CHECK_MESSAGE(contains(unknown, "unknown backend 'glooo'"), unknown);
  CHECK_MESSAGE(contains(unknown, "\"gloo\", \"mpi\""), unknown);
}

TEST_CASE("process_group: Work::wait times out naming the collective") {
  dist::Work work("allreduce #7 (test)");
  CHECK_FALSE(work.is_completed());
  std::string msg = error_of([&] { work.wait(20ms); });
  CHECK_MESSAGE(contains(msg, "allreduce #7 (test) did not complete within 20 ms"), msg);
  work.mark_failed(std::make_exception_ptr(ls::Error("boom")));
  CHECK(work.is_completed());
  CHECK_FALSE(work.is_success());
  CHECK(error_of([&] { work.wait(); }) == "boom");
}

TEST_CASE("process_group: a malformed LOCKSTEP_GLOO_THREADS is an error naming the variable") {
  ls::testing::run_ranks(2, [](int rank) {
    ::setenv("LOCKSTEP_GLOO_THREADS", rank == 0 ? "four" : "0", 1);
    const std::string message = error_of([] { dist::init_process_group("gloo"); });
    INFO(message);
    CHECK(message.find("LOCKSTEP_GLOO_THREADS") != std::string::npos);
    CHECK(message.find("is not an integer between 1 and 64") != std::string::npos);
  }, std::chrono::seconds(60));
}

TEST_CASE("process_group: a malformed LOCKSTEP_SHM_SPIN_US fails on every rank before connecting") {
  // It used to be read with atoll at load time: 'abc' silently meant 0, '-5' a negative spin.
  ls::testing::run_ranks(2, [](int rank) {
    ::setenv("LOCKSTEP_SHM_SPIN_US", rank == 0 ? "abc" : "-5", 1);
    const std::string message = error_of([] { dist::init_process_group("gloo"); });
    INFO(message);
    CHECK(message.find(rank == 0 ? "LOCKSTEP_SHM_SPIN_US='abc'" : "LOCKSTEP_SHM_SPIN_US='-5'") != std::string::npos);
    CHECK(message.find("is not an integer between 0 and 10000000") != std::string::npos);
    CHECK(message.find("could not agree") == std::string::npos);  // not dressed up as a rendezvous failure
  }, std::chrono::seconds(60));
}
