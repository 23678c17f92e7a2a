// tests/distributed/test_shm_buffers.cpp — allreduce in place on memory the peers map
// (Note [Shared-memory buffers]): bitwise the slot path's and the reference's results,
// views at an offset, one rank's tensor in ordinary memory, buffers freed and made again
// without the peers' mappings piling up, a rank killed inside an in-place allreduce, and
// the switch (Options::shm_buffers, LOCKSTEP_SHM_BUFFERS).
// Read before: distributed/process_group/shm/shm_buffers.h, tests/distributed/shm_test_util.h.
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include "core/factory.h"
#include "distributed/process_group/process_group_gloo.h"
#include "distributed/rendezvous.h"
#include "tests/distributed/collective_test_util.h"
#include "tests/distributed/shm_test_util.h"
#include "tests/support/errors.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;
using dist::ReduceOp;
using ls::testing::contains;
using ls::testing::error_of;
using ls::testing::make_shm_group;
using ls::testing::random_input;
using ls::testing::reference;
using ls::testing::same_bytes;

namespace {

// Lines of /proc/self/maps that map a buffer (this rank's and the peers' alike).
int mapped_buffers() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) n += line.find("memfd:lockstep-buffer") != std::string::npos;
  return n;
}

// x into a fresh buffer of `pg` (offset elements into it), returned as the view.
ls::Tensor in_buffer(dist::ProcessGroup& pg, const ls::Tensor& x, int64_t offset = 0) {
  ls::Tensor buffer = pg.empty_buffer(offset + x.numel(), x.dtype(), ls::Device::cpu());
  ls::Tensor view = buffer.narrow(0, offset, x.numel());
  view.copy_(x);
  return view;
}

}  // namespace

TEST_CASE("shm buffers: allreduce in place equals the slot path and the reference bitwise, 2 and 3 ranks") {
  for (int world : {2, 3}) {
    ls::testing::run_ranks(world, [world](int rank) {
      dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(30s));
      auto pg = make_shm_group(info, "buffers", true, 1 << 20, 30s);
      REQUIRE(pg->uses_shared_memory());
      const int before = mapped_buffers();
      for (ls::ScalarType dtype : {ls::kFloat32, ls::kBFloat16, ls::kFloat64}) {
        for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::MAX}) {
          for (int64_t n : {int64_t{70'001}, int64_t{1'000'003}}) {
            for (int64_t offset : {int64_t{0}, int64_t{13}}) {  // a view inside a bucket
              ls::Tensor t = in_buffer(*pg, random_input(rank, n, dtype), offset);
              pg->allreduce(t, op)->wait(30s);
              CHECK_MESSAGE(same_bytes(t.contiguous(), reference(world, n, dtype, op)),
                            n << " " << ls::dtype_name(dtype) << " " << dist::reduce_op_name(op) << " at +" << offset);
            }
          }
        }
      }
      CHECK_MESSAGE(mapped_buffers() > before, "no buffer was ever mapped: the in-place path did not run");
      // A buffer below the in-place threshold, and one rank's tensor in ordinary
      // memory: the slot path, same bits.
      ls::Tensor small = in_buffer(*pg, random_input(rank, 1001, ls::kFloat32));
      pg->allreduce(small)->wait(30s);
      CHECK(same_bytes(small, reference(world, 1001, ls::kFloat32, ReduceOp::SUM)));
      ls::Tensor mixed = rank == 1 ? random_input(rank, 300'007, ls::kFloat32)
                                   : in_buffer(*pg, random_input(rank, 300'007, ls::kFloat32));
      pg->allreduce(mixed)->wait(30s);
      CHECK(same_bytes(mixed, reference(world, 300'007, ls::kFloat32, ReduceOp::SUM)));
    }, 180s);
  }
}

TEST_CASE("shm buffers: freed buffers are unmapped by the peers, however many are made") {
  ls::testing::run_ranks(2, [](int rank) {
    dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(30s));
    auto pg = make_shm_group(info, "churn", true);
    int most = 0;
    for (int k = 0; k < 150; ++k) {  // more than the freed ring holds
      ls::Tensor t = in_buffer(*pg, ls::testing::rank_input(rank, 100'000, ls::kFloat32));
      pg->allreduce(t)->wait(30s);
      ls::testing::check_reduced(t, ReduceOp::SUM, 2, "allreduce on a fresh buffer");
      most = std::max(most, mapped_buffers());
    }
    // This rank's live buffer, the peer's, and at most a few the peer has freed since.
    CHECK_MESSAGE(most <= 4, most << " buffers mapped at once");
  }, 120s);
}

TEST_CASE("shm buffers: a rank killed inside an in-place allreduce fails the others naming it") {
  ls::testing::check_killed_rank_named(1 << 20, [](dist::ProcessGroup& pg) { return in_buffer(pg, ls::ones({1'000'000})); });
}

TEST_CASE("shm buffers: off by option or LOCKSTEP_SHM_BUFFERS=0 (ordinary tensors, same results), and bad values") {
  ls::testing::run_ranks(2, [](int rank) {
    dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(20s));
    auto off = make_shm_group(info, "off", true, 1 << 20, 20s, false);
    setenv("LOCKSTEP_SHM_BUFFERS", "0", 1);
    auto env_off = make_shm_group(info, "env_off", true);
    const int before = mapped_buffers();
    for (auto* pg : {off.get(), env_off.get()}) {
      ls::Tensor t = in_buffer(*pg, random_input(rank, 400'001, ls::kFloat32));
      pg->allreduce(t)->wait(20s);
      CHECK(same_bytes(t, reference(2, 400'001, ls::kFloat32, ReduceOp::SUM)));
    }
    CHECK(mapped_buffers() == before);
    setenv("LOCKSTEP_SHM_BUFFERS", "yes", 1);
    std::string msg = error_of([&] { make_shm_group(info, "bad", true); });
    CHECK_MESSAGE(contains(msg, "LOCKSTEP_SHM_BUFFERS='yes' must be 0"), msg);
    unsetenv("LOCKSTEP_SHM_BUFFERS");
  }, 60s);
}

TEST_CASE("shm buffers: a buffer the kernel refuses (no file descriptors left) is ordinary memory, still correct") {
  ls::testing::run_ranks(2, [](int rank) {
    dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(20s));
    auto pg = make_shm_group(info, "refused", true);
    // Every rank past the group's construction first: rank 0 hosts the store,
    // whose server cannot accept a late rank's connection while rank 0 has no
    // file descriptors left (without this the test failed now and then).
    pg->barrier()->wait(20s);
    const int before = mapped_buffers();
    rlimit saved{};
    REQUIRE(getrlimit(RLIMIT_NOFILE, &saved) == 0);
    rlimit none = saved;
    none.rlim_cur = 0;  // memfd_create fails with EMFILE
    REQUIRE(setrlimit(RLIMIT_NOFILE, &none) == 0);
    ls::Tensor buffer = pg->empty_buffer(300'007, ls::kFloat32, ls::Device::cpu());
    REQUIRE(setrlimit(RLIMIT_NOFILE, &saved) == 0);
    CHECK(mapped_buffers() == before);
    CHECK(buffer.sum().item<float>() == 0.0f);  // zero-filled like the shared kind
    buffer.copy_(random_input(rank, 300'007, ls::kFloat32));
    pg->allreduce(buffer)->wait(20s);
    CHECK(same_bytes(buffer, reference(2, 300'007, ls::kFloat32, ReduceOp::SUM)));
  }, 60s);
}
