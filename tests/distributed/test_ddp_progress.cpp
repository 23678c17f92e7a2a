// tests/distributed/test_ddp_progress.cpp — with DDPOptions().progress_store, a
// timed-out wait names the ranks that did not arrive and where they are (Note
// [Progress board], distributed/ddp/ddp_progress.h). Three ranks, rank 1 stalls:
// before its third forward (the others' backward fingerprint exchange times
// out) or in the middle of its third backward (a bucket's AllReduce times
// out); the error on ranks 0 and 2 names rank 1 with its position and does not
// name the other waiting rank.
// Read before: distributed/ddp/ddp_progress.h, tests/support/multiprocess.h.
#include <doctest/doctest.h>

#include <cstdlib>
#include <thread>

#include "distributed/store/tcp_store.h"
#include "tests/distributed/ddp_beyond_util.h"
#include "tests/support/errors.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;

namespace {

using lockstep::testing::contains;

// Trains BranchyMLP with one bucket per parameter; rank 1 stalls at step 2 (in
// `stall_in_backward` ? a gradient hook : before the forward) for longer than
// the 2 s timeout. Returns the first error this rank saw ("" if none).
std::string train_with_a_stalled_rank(int rank, bool stall_in_backward) {
  auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(2s));
  // A second connection to the rendezvous store, for the progress board.
  auto store = std::make_shared<dist::TCPStore>("127.0.0.1", std::atoi(std::getenv("MASTER_PORT")), false, 20s);
  ls::manual_seed(0);
  auto model = std::make_shared<ls::testing::BranchyMLP>();
  dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().bucket_cap_mb(0).progress_store(store));
  int step_now = 0;
  auto stall = [&] { std::this_thread::sleep_for(5s); };
  // Registered after DDP's hooks: fc2.weight's gradient (among the first) has been handed to DDP.
  ls::autograd::HookHandle staller = model->fc2->weight.register_post_accumulate_grad_hook([&](ls::Tensor&) {
    if (stall_in_backward && rank == 1 && step_now == 2) stall();
  });
  std::string error;
  for (int step = 0; step < 3 && error.empty(); ++step) {
    step_now = step;
    if (!stall_in_backward && rank == 1 && step == 2) stall();
    try {
      ls::manual_seed(10 * step + rank);
      ddp.forward(ls::randn({4, 6}), /*use_side=*/true).sum().backward();
    } catch (const ls::Error& e) {
      error = e.what();
    }
  }
  staller.remove();
  // Leave together: rank 1 may still be finishing the step the others gave up on.
  store->set("test/done/" + std::to_string(rank), "1");
  store->wait({"test/done/0", "test/done/1", "test/done/2"}, 30s);
  // Rank 0 hosts the store: it leaves last, once every other rank's wait above
  // has returned (else a rank still reading its reply sees the server close).
  if (rank == 0) {
    store->wait({"test/left/1", "test/left/2"}, 30s);
  } else {
    store->set("test/left/" + std::to_string(rank), "1");
  }
  return error;
}

}  // namespace

TEST_CASE("ddp progress board: a rank stalled before its forward is named with its last position") {
  ls::testing::run_ranks(3, [](int rank) {
    const std::string error = train_with_a_stalled_rank(rank, /*stall_in_backward=*/false);
    if (rank == 1) return;  // it only arrived late; what it saw depends on timing
    CHECK_MESSAGE(contains(error, "backward #3: the iteration fingerprint exchange"), error);
    CHECK_MESSAGE(contains(error, "Progress board: rank 1 did not arrive: its last position is 'finished backward #2'"),
                  error);
    CHECK_MESSAGE(contains(error, "(this rank waits at 'backward #3, 0 of 6 buckets launched')"), error);
    CHECK_MESSAGE(!contains(error, "rank " + std::to_string(2 - rank) + " did not arrive"), error);
  }, 90s);
}

TEST_CASE("ddp progress board: a rank stalled mid-backward is named with the buckets it launched") {
  ls::testing::run_ranks(3, [](int rank) {
    const std::string error = train_with_a_stalled_rank(rank, /*stall_in_backward=*/true);
    if (rank == 1) return;
    CHECK_MESSAGE(contains(error, "backward #3: the AllReduce of bucket"), error);
    CHECK_MESSAGE(contains(error, "Progress board: rank 1 did not arrive: its last position is 'backward #3, "), error);
    CHECK_MESSAGE(contains(error, " of 6 buckets launched'"), error);
    CHECK_MESSAGE(!contains(error, "rank " + std::to_string(2 - rank) + " did not arrive"), error);
  }, 90s);
}
