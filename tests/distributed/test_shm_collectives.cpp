// tests/distributed/test_shm_collectives.cpp — the Gloo group's shared-memory path for ranks
// on one host (Note [Shared memory on one host]): results bitwise equal to the TCP path
// and to a rank-order reference loop, for every dtype and op, sizes from 1 element to
// millions, 2 to 4 ranks; and its failures: a rank killed mid-collective, a silent rank,
// mismatched collectives, a /dev/shm too small or refusing the segment (fallback to TCP),
// a segment name that exists, the name gone from /dev/shm after the rendezvous.
// Read before: distributed/process_group/shm/shm_channel.h,
// distributed/process_group/process_group_gloo.h.
#include <doctest/doctest.h>

#include <signal.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/factory.h"
#include "distributed/process_group/process_group_gloo.h"
#include "distributed/process_group/reduce_kernels.h"
#include "distributed/process_group/shm/shm_channel.h"
#include "distributed/process_group/shm/shm_segment.h"
#include "distributed/rendezvous.h"
#include "distributed/store/hash_store.h"
#include "distributed/store/prefix_store.h"
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

namespace {

using ls::testing::make_shm_group;
using ls::testing::random_input;
using ls::testing::reference;
using ls::testing::same_bytes;

std::string what_case(int64_t n, ls::ScalarType dtype, ReduceOp op) {
  return ls::detail::str(n, " ", ls::dtype_name(dtype), " ", dist::reduce_op_name(op));
}

// Every dtype and op at `sizes` (and `large` for f32 / bf16 SUM and AVG) equals the reference bitwise.
void check_against_reference(int rank, int world, dist::ProcessGroup& pg, const std::vector<int64_t>& sizes,
                             int64_t large) {
  for (ls::ScalarType dtype : ls::testing::reducible_dtypes()) {
    for (ReduceOp op : ls::testing::all_reduce_ops()) {
      std::vector<int64_t> ns = sizes;
      if ((dtype == ls::kFloat32 || dtype == ls::kBFloat16) && (op == ReduceOp::SUM || op == ReduceOp::AVG)) {
        ns.push_back(large);
      }
      for (int64_t n : ns) {
        ls::Tensor t = random_input(rank, n, dtype);
        pg.allreduce(t, op)->wait(20s);
        CHECK_MESSAGE(same_bytes(t, reference(world, n, dtype, op)), what_case(n, dtype, op));
      }
    }
  }
}

}  // namespace

TEST_CASE("shm: 2 ranks, allreduce bitwise equal to Gloo over TCP and to the reference, every dtype and op") {
  ls::testing::run_ranks(2, [](int rank) {
    dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(20s));
    auto shm = make_shm_group(info, "shm", true);
    auto tcp = make_shm_group(info, "tcp", false);
    REQUIRE(shm->uses_shared_memory());
    REQUIRE_FALSE(tcp->uses_shared_memory());
    check_against_reference(rank, 2, *shm, {1, 7, 10001}, 3'000'017);
    for (ls::ScalarType dtype : ls::testing::reducible_dtypes()) {
      for (int64_t n : {int64_t{1}, int64_t{10001}, int64_t{300'001}}) {
        ls::Tensor a = random_input(rank, n, dtype), b = a.clone();
        shm->allreduce(a)->wait(20s);
        tcp->allreduce(b)->wait(20s);
        CHECK_MESSAGE(same_bytes(a, b), what_case(n, dtype, ReduceOp::SUM));
      }
    }
  }, 120s);
}

TEST_CASE("shm: 3 and 4 ranks with 16 KiB slots (many chunks), allreduce equal to the rank-order reference") {
  for (int world : {3, 4}) {
    ls::testing::run_ranks(world, [world](int rank) {
      dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(30s));
      auto pg = make_shm_group(info, "shm", true, 16384, 30s);
      REQUIRE(pg->uses_shared_memory());
      check_against_reference(rank, world, *pg, {1, 5, 1023, 10001}, 100'003);
      // Small integers: every op is exact, so the values themselves are known.
      for (ReduceOp op : ls::testing::all_reduce_ops()) {
        ls::Tensor t = ls::testing::rank_input(rank, 2051, ls::kFloat32);
        pg->allreduce(t, op)->wait(30s);
        ls::testing::check_reduced(t, op, world, "exact allreduce");
      }
    }, 120s);
  }
}

TEST_CASE("shm: broadcast and allgather across chunk boundaries, every root") {
  ls::testing::run_ranks(3, [](int rank) {
    dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(20s));
    auto pg = make_shm_group(info, "shm", true, 256);
    REQUIRE(pg->uses_shared_memory());
    for (int64_t n : {int64_t{1}, int64_t{63}, int64_t{1001}}) {
      for (int root = 0; root < 3; ++root) {
        ls::Tensor t = random_input(rank, n, ls::kFloat64);
        pg->broadcast(t, root)->wait(20s);
        CHECK_MESSAGE(same_bytes(t, random_input(root, n, ls::kFloat64)), "broadcast of " << n << " from " << root);
      }
      std::vector<ls::Tensor> outputs;
      pg->allgather(outputs, random_input(rank, n, ls::kBFloat16))->wait(20s);
      REQUIRE(outputs.size() == 3);
      for (int q = 0; q < 3; ++q) {
        CHECK_MESSAGE(same_bytes(outputs[q], random_input(q, n, ls::kBFloat16)), "allgather of " << n << " from " << q);
      }
    }
  }, 60s);
}

TEST_CASE("shm: a rank killed while the others wait in an allreduce fails them naming it, well within the timeout") {
  // 4 KiB slots: 25 chunks of 1024 floats.
  ls::testing::check_killed_rank_named(4096, [](dist::ProcessGroup&) { return ls::ones({100'000}); });
}

TEST_CASE("shm: a rank that stops issuing collectives is caught by the group's timeout") {
  ls::testing::run_ranks(2, [](int rank) {
    dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(20s));
    auto pg = make_shm_group(info, "shm", true);
    REQUIRE(pg->uses_shared_memory());
    ls::Tensor t = ls::ones({10});
    pg->allreduce(t)->wait(10s);
    if (rank == 1) {
      std::this_thread::sleep_for(2s);  // alive, but silent past rank 0's timeout
      return;
    }
    pg->set_timeout(500ms);
    std::string msg = error_of([&] { pg->broadcast(t, 0)->wait(10s); });
    CHECK_MESSAGE(contains(msg, "gloo broadcast #1"), msg);
    CHECK_MESSAGE(contains(msg, "rank 1 made no progress for 500 ms"), msg);
  }, 60s);
}

TEST_CASE("shm: mismatched sizes or kinds after the first collective raise an error naming the rank") {
  ls::testing::run_ranks(2, [](int rank) {
    dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(20s));
    auto sizes = make_shm_group(info, "sizes", true, 1024);
    ls::Tensor first = ls::ones({4});
    sizes->allreduce(first)->wait(10s);  // #0 agrees (and is the fingerprinted one)
    ls::Tensor t = ls::ones({rank == 0 ? 1000 : 3000});  // 4 chunks against 12
    std::string msg = error_of([&] { sizes->allreduce(t)->wait(10s); });
    const int other = 1 - rank;
    CHECK_MESSAGE(contains(msg, "rank " + std::to_string(other) + " issued allreduce #1 of " +
                                    std::to_string(other == 0 ? 1000 : 3000) + " float32"), msg);
    CHECK_MESSAGE(contains(msg, "number of elements"), msg);
    std::string next = error_of([&] { sizes->barrier()->wait(10s); });
    CHECK_MESSAGE(contains(next, "unusable after an earlier failure"), next);

    auto kinds = make_shm_group(info, "kinds", true);
    kinds->allreduce(first)->wait(10s);
    std::vector<ls::Tensor> outputs;
    std::string kind = error_of([&] {
      (rank == 0 ? kinds->broadcast(first, 0) : kinds->allgather(outputs, first))->wait(10s);
    });
    CHECK_MESSAGE(contains(kind, rank == 0 ? "issued allgather #1" : "issued broadcast #1"), kind);
  }, 60s);
}

TEST_CASE("shm: a /dev/shm too small, or refusing the segment, leaves every rank on TCP with correct results") {
  ls::testing::run_ranks(2, [](int rank) {
    dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(20s));
    // 1 TiB slots: more than /dev/shm has free.
    auto huge = make_shm_group(info, "huge", true, size_t{1} << 40);
    CHECK_FALSE(huge->uses_shared_memory());
    ls::Tensor t = ls::testing::rank_input(rank, 1001, ls::kFloat32);
    huge->allreduce(t)->wait(10s);
    ls::testing::check_reduced(t, ReduceOp::SUM, 2, "allreduce after falling back to TCP");
    // Rank 0 may write no file above 64 KiB: sizing the segment fails (EFBIG).
    if (rank == 0) {
      signal(SIGXFSZ, SIG_IGN);
      rlimit limit{64 << 10, 64 << 10};
      REQUIRE(setrlimit(RLIMIT_FSIZE, &limit) == 0);
    }
    auto refused = make_shm_group(info, "refused", true);
    CHECK_FALSE(refused->uses_shared_memory());
    ls::Tensor u = ls::testing::rank_input(rank, 77, ls::kBFloat16);
    refused->allreduce(u, ReduceOp::MAX)->wait(10s);
    ls::testing::check_reduced(u, ReduceOp::MAX, 2, "allreduce after a refused segment");
  }, 60s);
}

TEST_CASE("shm: the segment's name is gone from /dev/shm once all ranks mapped it, and a name is never reused") {
  ls::testing::run_ranks(2, [](int rank) {
    dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(20s));
    dist::PrefixStore store("unlinked", info.store);
    std::string why_not;
    auto channel = dist::detail::ShmChannel::connect(store, rank, 2, 4096, true, 20s, &why_not);
    REQUIRE_MESSAGE(channel != nullptr, why_not);
    CHECK(channel->segment_name().rfind("/lockstep-", 0) == 0);
    // Rank 0 unlinks the name before its first collective; the mapping still joins the ranks.
    double x = rank + 1;
    channel->allreduce(&x, 1, ls::kFloat64, ReduceOp::SUM,
                       dist::detail::make_fingerprint(0, dist::detail::CollectiveKind::ALLREDUCE), 10s);
    CHECK(x == 3.0);
    CHECK(access(("/dev/shm" + channel->segment_name()).c_str(), F_OK) != 0);
  }, 60s);
  const std::string name = "/lockstep-test-" + std::to_string(getpid());
  auto first = dist::detail::ShmSegment::create(name, 4096);
  std::string msg = error_of([&] { dist::detail::ShmSegment::create(name, 4096); });
  CHECK_MESSAGE(contains(msg, "never reused"), msg);
}

TEST_CASE("shm: ranks whose host identities differ stay on Gloo, LOCKSTEP_SHM=0 and bad values") {
  auto store = std::make_shared<dist::HashStore>();
  store->set("shm/host/1", ls::distributed::Bytes{'e', 'l', 's', 'e'});  // "rank 1" on another host
  std::string why_not = "unset";
  CHECK(dist::detail::ShmChannel::connect(*store, 0, 2, 4096, true, 5s, &why_not) == nullptr);
  CHECK(why_not.empty());
  ls::testing::run_ranks(2, [](int) {
    dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(20s));
    setenv("LOCKSTEP_SHM", "0", 1);
    CHECK_FALSE(make_shm_group(info, "off", true)->uses_shared_memory());
    setenv("LOCKSTEP_SHM", "yes", 1);
    std::string msg = error_of([&] { make_shm_group(info, "bad", true); });
    CHECK_MESSAGE(contains(msg, "LOCKSTEP_SHM='yes'"), msg);
    unsetenv("LOCKSTEP_SHM");
  }, 60s);
}

// The identity a child process computes, after unsharing its network namespace if asked
// (as root, or through a new user namespace where unprivileged ones are allowed).
static std::string identity_in_child(bool own_network, std::string* error) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    std::string out;
    if (own_network && unshare(CLONE_NEWNET) != 0 && unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) {
      out = std::string("!unshare: ") + std::strerror(errno);
    } else {
      out = dist::detail::shm_host_identity();
    }
    (void)!write(fds[1], out.data(), out.size());
    _exit(0);
  }
  close(fds[1]);
  std::string got;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) got.append(buf, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got.rfind("!", 0) == 0) *error = got.substr(1);
  return got;
}

TEST_CASE("shm: processes in different network namespaces (containers, bench/hosts.sh) do not share the segment") {
  const std::string mine = dist::detail::shm_host_identity();
  std::string error;
  CHECK(identity_in_child(false, &error) == mine);
  const std::string other = identity_in_child(true, &error);
  INFO("a new network namespace needs root or unprivileged user namespaces");
  REQUIRE_MESSAGE(error.empty(), error);
  CHECK(other != mine);
  CHECK(mine.find("net:[") != std::string::npos);
}
