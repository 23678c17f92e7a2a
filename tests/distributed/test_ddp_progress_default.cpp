// tests/distributed/test_ddp_progress_default.cpp — the progress board is on by
// default, on the process group's own store (ProcessGroup::store()): with no
// DDPOptions().progress_store, a timed-out wait still names the rank that did
// not arrive; progress_board(false) and progress_store(nullptr) turn it off.
// Three ranks, rank 1 stalls before its third forward for longer than the 2 s
// timeout (Note [Progress board], distributed/ddp/ddp_progress.h).
// Read before: tests/distributed/test_ddp_progress.cpp (the explicit-store case).
#include <doctest/doctest.h>

#include <functional>
#include <thread>

#include "distributed/store/hash_store.h"
#include "tests/distributed/ddp_beyond_util.h"
#include "tests/support/errors.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;

namespace {

using lockstep::testing::contains;

// Trains BranchyMLP on 3 ranks with `options`; rank 1 sleeps 5 s before step
// 2's forward. Returns the first error this rank saw ("" if none).
std::string train_with_a_late_rank(int rank, dist::DDPOptions options) {
  auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(2s));
  REQUIRE(pg->store() != nullptr);
  ls::manual_seed(0);
  auto model = std::make_shared<ls::testing::BranchyMLP>();
  dist::DistributedDataParallel ddp(model, pg, options.bucket_cap_mb(0));
  std::string error;
  for (int step = 0; step < 3 && error.empty(); ++step) {
    if (rank == 1 && step == 2) std::this_thread::sleep_for(5s);
    try {
      ls::manual_seed(10 * step + rank);
      ddp.forward(ls::randn({4, 6}), /*use_side=*/true).sum().backward();
    } catch (const ls::Error& e) {
      error = e.what();
    }
  }
  // Leave together, through the group's store: rank 1 may still be finishing.
  auto store = pg->store();
  store->set("test/done/" + std::to_string(rank), "1");
  store->wait({"test/done/0", "test/done/1", "test/done/2"}, 30s);
  return error;
}

void expect_board(const std::function<dist::DDPOptions()>& options, bool board_expected) {
  ls::testing::run_ranks(3, [&](int rank) {
    const std::string error = train_with_a_late_rank(rank, options());
    if (rank == 1) return;  // it only arrived late; what it saw depends on timing
    CHECK_MESSAGE(contains(error, "backward #3: the iteration fingerprint exchange"), error);
    if (board_expected) {
      CHECK_MESSAGE(contains(error, "Progress board: rank 1 did not arrive: its last position is "
                                    "'finished backward #2'"), error);
      CHECK_MESSAGE(!contains(error, "rank " + std::to_string(2 - rank) + " did not arrive"), error);
    } else {
      CHECK_MESSAGE(!contains(error, "Progress board"), error);
    }
  }, 90s);
}

}  // namespace

TEST_CASE("ddp progress board: on by default, on the process group's store") {
  expect_board([] { return dist::DDPOptions(); }, /*board_expected=*/true);
}

TEST_CASE("ddp progress board: progress_board(false) and progress_store(nullptr) turn it off") {
  expect_board([] { return dist::DDPOptions().progress_board(false); }, /*board_expected=*/false);
  expect_board([] { return dist::DDPOptions().progress_store(nullptr); }, /*board_expected=*/false);
}

TEST_CASE("process_group: store() is the store a Gloo group was created from") {
  auto store = std::make_shared<dist::HashStore>();
  dist::ProcessGroupGloo pg(store, 0, 1);
  CHECK(pg.store() == store);
}

TEST_CASE("process_group: a round-robin group from init_process_group has a store every rank reaches") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(10s).round_robin(2));
    REQUIRE(pg->backend_name() == "round_robin");
    auto store = pg->store();
    REQUIRE(store != nullptr);
    store->set("test/hello/" + std::to_string(rank), "from " + std::to_string(rank));
    const std::string other = "test/hello/" + std::to_string(1 - rank);
    store->wait({other}, 10s);
    const auto bytes = store->get(other);
    CHECK(std::string(bytes.begin(), bytes.end()) == "from " + std::to_string(1 - rank));
  }, 60s);
}
