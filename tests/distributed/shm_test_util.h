// tests/distributed/shm_test_util.h — what the shared-memory tests share: a Gloo group
// with shared memory on or off, pseudo-random inputs per rank, the rank-order reference
// allreduce, and a bitwise comparison.
// Read before: distributed/process_group/shm/shm_channel.h.
// Read next: tests/distributed/test_shm_collectives.cpp, tests/distributed/test_shm_buffers.cpp.
#pragma once

#include <signal.h>

#include <chrono>
#include <functional>
#include <thread>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/factory.h"
#include "distributed/process_group/process_group_gloo.h"
#include "distributed/process_group/reduce_kernels.h"
#include "distributed/rendezvous.h"
#include "distributed/store/prefix_store.h"
#include "tests/support/errors.h"
#include "tests/support/multiprocess.h"

namespace lockstep::testing {

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using dist::ReduceOp;
using namespace std::chrono_literals;

// A group on its own prefix of the job's store; shared memory (and its buffers) on or off.
inline std::unique_ptr<dist::ProcessGroupGloo> make_shm_group(const dist::RendezvousInfo& info,
                                                              const std::string& prefix, bool shared_memory,
                                                              size_t slot_bytes = 1 << 20,
                                                              std::chrono::milliseconds timeout = 20s,
                                                              bool buffers = true) {
  dist::ProcessGroupGloo::Options options;
  options.timeout = timeout;
  options.shared_memory = shared_memory;
  options.shm_slot_bytes = slot_bytes;
  options.shm_buffers = buffers;
  auto store = std::make_shared<dist::PrefixStore>(prefix, info.store);
  return std::make_unique<dist::ProcessGroupGloo>(store, info.rank, info.world_size, options);
}

// Rank r's input: n pseudo-random values of `dtype` (fractions, so sums round).
inline ls::Tensor random_input(int rank, int64_t n, ls::ScalarType dtype) {
  std::vector<double> v(n);
  uint64_t h = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(rank + 1);
  for (int64_t i = 0; i < n; ++i) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    const double x = static_cast<double>(static_cast<int64_t>(h >> 33) % 2000001 - 1000000);
    v[i] = dtype == ls::kInt64 ? x : x / 999983.0;
  }
  return ls::tensor(v, {n}).to(dtype);
}

// The plain reference: op over ranks 0..world-1 in rank order, with the same
// element kernel, then AVG's division.
inline ls::Tensor reference(int world, int64_t n, ls::ScalarType dtype, ReduceOp op) {
  ls::Tensor acc = random_input(0, n, dtype);
  auto fn = dist::detail::reduce_function(dtype, op, "reference");
  for (int r = 1; r < world; ++r) {
    ls::Tensor x = random_input(r, n, dtype);
    fn(acc.raw_data(), acc.raw_data(), x.raw_data(), static_cast<size_t>(n));
  }
  if (op == ReduceOp::AVG) dist::detail::divide_in_place(acc.raw_data(), dtype, n, world);
  return acc;
}

inline bool same_bytes(const ls::Tensor& a, const ls::Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// 3 ranks allreduce make(group) once; then rank 2 is SIGKILLed while the others
// wait in the next allreduce: their error names it, within 10 s, and the group
// refuses the collective after.
inline void check_killed_rank_named(size_t slot_bytes, const std::function<ls::Tensor(dist::ProcessGroup&)>& make) {
  auto results = launch_ranks(3, [&](int rank) {
    dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(20s));
    auto pg = make_shm_group(info, "killed", true, slot_bytes, 20s);
    REQUIRE(pg->uses_shared_memory());
    ls::Tensor t = make(*pg);
    pg->allreduce(t)->wait(20s);  // #0 succeeds
    if (rank == 2) {
      std::this_thread::sleep_for(200ms);  // the others are inside allreduce #1, waiting for it
      raise(SIGKILL);
    }
    const auto start = std::chrono::steady_clock::now();
    std::string msg = error_of([&] { pg->allreduce(t)->wait(30s); });
    const auto took = std::chrono::steady_clock::now() - start;
    CHECK_MESSAGE(contains(msg, "gloo allreduce #1"), msg);
    CHECK_MESSAGE(contains(msg, "rank 2"), msg);
    CHECK_MESSAGE(contains(msg, "exited"), msg);
    CHECK_MESSAGE(took < 10s, "the survivor took " << std::chrono::duration<double>(took).count() << " s");
    std::string next = error_of([&] { pg->allreduce(t)->wait(10s); });
    CHECK_MESSAGE(contains(next, "unusable after an earlier failure"), next);
  }, 60s);
  REQUIRE(results.size() == 3);
  CHECK(results[2].signal == SIGKILL);
  CHECK_MESSAGE(results[0].ok(), results[0].describe());
  CHECK_MESSAGE(results[1].ok(), results[1].describe());
}

}  // namespace lockstep::testing
