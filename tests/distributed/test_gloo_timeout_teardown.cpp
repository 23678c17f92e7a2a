// tests/distributed/test_gloo_timeout_teardown.cpp — a Gloo collective that times
// out while others are in flight: every rank that waited gets the clear timeout
// error, the group refuses later work at once, and the process tears the group
// down and exits cleanly (no crash; under scripts/sanitize.sh tsan / asan, no
// report: a sanitizer report makes the rank exit non-zero and the test fail).
// This is the case Note [Gloo buffers after a failure] is about: Gloo's loop
// thread may still hold the failed collectives' buffers when they throw; and
// Note [Gloo teardown across worker threads]: when several collectives fail at
// once, one worker's Gloo touches the others' buffers while they unwind.
// Read before: distributed/process_group/process_group_gloo_pending.h,
// distributed/process_group/process_group_gloo_teardown.h, tests/support/multiprocess.h.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/factory.h"
#include "distributed/init.h"
#include "distributed/process_group/process_group_gloo.h"
#include "tests/support/errors.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;

namespace {

using lockstep::testing::contains;
using lockstep::testing::error_of;

// Allocates and touches memory after a group's teardown: a write into a freed
// buffer by a leftover Gloo thread would show up here under ASan/TSan.
void touch_memory_after_teardown() {
  ls::Tensor after = ls::ones({1 << 20});
  CHECK(after.sum().item<float>() == static_cast<float>(1 << 20));
}

template <class Results>
void expect_every_rank_ok(const Results& results, size_t ranks) {
  REQUIRE(results.size() == ranks);
  for (const auto& r : results) CHECK_MESSAGE(r.ok(), r.describe());
}

}  // namespace

TEST_CASE("process_group: a rank that never joins makes the others time out, then every rank tears down cleanly") {
  // Rank 2 stays alive but issues nothing after #0; ranks 0 and 1 have several
  // collectives in flight at once (a chunked allreduce, a broadcast, an
  // allgather and a barrier on the group's worker threads), so data moves
  // between ranks 0 and 1 while the timeout fires.
  auto results = ls::testing::launch_ranks(3, [](int rank) {
    {
      auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s));
      ls::Tensor warm = ls::ones({16});
      pg->allreduce(warm)->wait(20s);  // #0: everyone is connected
      if (rank == 2) {
        std::this_thread::sleep_for(4s);  // silent past the others' timeout, then leaves
        return;
      }
      pg->set_timeout(1000ms);
      ls::Tensor big = ls::ones({3 << 20});  // (3M,) 12 MB: 3 pieces of 4 MiB on the worker threads
      ls::Tensor small = ls::ones({1000});   // (1000,)
      std::vector<ls::Tensor> gathered;
      std::vector<std::shared_ptr<dist::Work>> works = {pg->allreduce(big), pg->broadcast(small, 0),
                                                        pg->allgather(gathered, small), pg->barrier()};
      std::vector<std::string> errors;
      // Each wait is bounded at 20 s, far past the 1 s timeout: a hang would
      // read "did not complete within 20000 ms" instead of the errors checked here.
      for (auto& w : works) errors.push_back(error_of([&] { w->wait(20s); }));
      // The allreduce is #1-#3 (its pieces); whichever piece failed first is named.
      CHECK_MESSAGE(contains(errors[0], "gloo allreduce #"), errors[0]);
      CHECK_MESSAGE(contains(errors[0], "timeout 1000 ms"), errors[0]);
      CHECK_MESSAGE(contains(errors[0], "a peer rank may have exited, crashed, or stopped issuing collectives"),
                    errors[0]);
      // The others either failed with Gloo's error or, like rank 1's broadcast
      // (it only needs rank 0), completed; none may hang.
      for (size_t k = 1; k < errors.size(); ++k) {
        CHECK_MESSAGE((errors[k] == "(no error)" || contains(errors[k], "gloo ")), errors[k]);
        CHECK_MESSAGE(!contains(errors[k], "did not complete within"), errors[k]);
      }
      CHECK_MESSAGE(contains(errors[3], "gloo barrier #"), errors[3]);  // a barrier needs rank 2
      // The group is failed for good: the next collective fails without
      // touching the network, naming the first failure (a 1 s timeout could
      // not produce this message).
      std::string next = error_of([&] { pg->allreduce(small)->wait(20s); });
      CHECK_MESSAGE(contains(next, "unusable after an earlier failure"), next);
      // Tear down with the failed collectives' buffers gone out of scope first
      // (a hang here is caught by launch_ranks' 90 s limit).
      works.clear();
      big = ls::Tensor();
      pg.reset();
    }
    touch_memory_after_teardown();
  }, 90s);
  expect_every_rank_ok(results, 3);
}

// See Note [Gloo teardown across worker threads]
// (distributed/process_group/process_group_gloo_teardown.h):
// when several collectives fail at once, one worker's Gloo signals the other
// workers' buffers while those workers unwind and free them. Rank 1 joins the
// first allreduces and then stops issuing, the way a rank stalled mid-backward
// leaves DDP's later buckets hanging; ranks 0 and 2 have four of the hanging
// allreduces (plus an allgather) in flight on their worker threads when the
// timeouts fire, on both sides of every pair. Under scripts/sanitize.sh tsan,
// a buffer freed before the group's teardown finished is reported and fails
// the rank; without a sanitizer the test checks the errors and a clean exit.
TEST_CASE("process_group: collectives failing at once on several worker threads each report the timeout") {
  constexpr int kJoined = 3;  // rank 1 issues allreduces #1..#3 only
  constexpr int kIssued = 8;
  auto results = ls::testing::launch_ranks(3, [](int rank) {
    {
      auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s));
      ls::Tensor warm = ls::ones({16});
      pg->allreduce(warm)->wait(20s);  // #0: everyone is connected
      std::vector<ls::Tensor> tensors;
      std::vector<std::shared_ptr<dist::Work>> works;
      pg->set_timeout(1000ms);
      for (int k = 0; k < (rank == 1 ? kJoined : kIssued); ++k) {
        tensors.push_back(ls::full({1000}, static_cast<float>(k + 1)));  // (1000,): ring allreduce
        works.push_back(pg->allreduce(tensors.back()));
      }
      if (rank == 1) {
        for (int k = 0; k < kJoined; ++k) {
          CHECK_MESSAGE(error_of([&] { works[k]->wait(20s); }) == "(no error)", "allreduce ", k);
        }
        std::this_thread::sleep_for(3s);  // silent past the others' timeout, then leaves
        return;
      }
      ls::Tensor small = ls::ones({1000});  // (1000,)
      std::vector<ls::Tensor> gathered;
      works.push_back(pg->allgather(gathered, small));
      std::vector<std::string> errors;
      for (auto& w : works) errors.push_back(error_of([&] { w->wait(20s); }));
      // The allreduces rank 1 joined completed: every rank contributed k + 1.
      for (int k = 0; k < kJoined; ++k) {
        CHECK_MESSAGE(errors[k] == "(no error)", errors[k]);
        CHECK(tensors[k].sum().item<float>() == 3.0f * static_cast<float>(k + 1) * 1000.0f);
      }
      // The others failed: with the timeout when they were in flight (woken by
      // their own timeout or by another worker's), else at once as unusable.
      int timed_out = 0;
      for (size_t k = kJoined; k < errors.size(); ++k) {
        const std::string kind = k + 1 < errors.size() ? "gloo allreduce #" : "gloo allgather #";
        CHECK_MESSAGE(contains(errors[k], kind), errors[k]);
        const bool timeout = contains(errors[k], "timeout 1000 ms");
        CHECK_MESSAGE((timeout || contains(errors[k], "unusable after an earlier failure")), errors[k]);
        timed_out += timeout ? 1 : 0;
      }
      // Four worker threads: the first four hanging allreduces were all inside Gloo.
      CHECK_MESSAGE(timed_out >= 4, "timed out: ", timed_out);
      std::string next = error_of([&] { pg->barrier()->wait(20s); });
      CHECK_MESSAGE(contains(next, "unusable after an earlier failure"), next);
      works.clear();
      tensors.clear();
      pg.reset();
    }
    touch_memory_after_teardown();
  }, 90s);
  expect_every_rank_ok(results, 3);
}

// The same, with data moving: all three ranks run a chunked allreduce (three
// pieces of 4 MiB on three worker threads, 5 s timeout) that rank 2 joins
// late, while on ranks 0 and 1 a barrier rank 2 never issues times out after
// 1 s on the fourth thread. The barrier's worker signals every pair while the
// allreduce's workers are between sends and receives, so they wake on one pair
// while Gloo's scratch buffers still have receives posted on another.
TEST_CASE("process_group: a timeout on one worker thread while another moves data tears the group down cleanly") {
  auto results = ls::testing::launch_ranks(3, [](int rank) {
    {
      auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s));
      ls::Tensor warm = ls::ones({16});
      pg->allreduce(warm)->wait(20s);  // #0: everyone is connected
      ls::Tensor big = ls::ones({3 << 20});  // (3M,) 12 MB: 3 pieces of 4 MiB
      if (rank == 2) {
        std::this_thread::sleep_for(700ms);  // joins the allreduce just before the others' barrier times out
        pg->set_timeout(5000ms);
        std::string msg = error_of([&] { pg->allreduce(big)->wait(20s); });
        // Ranks 0 and 1 may have torn the group down before it finished.
        CHECK_MESSAGE((msg == "(no error)" || contains(msg, "gloo allreduce #")), msg);
        std::this_thread::sleep_for(1500ms);  // never issues the barrier
        return;
      }
      pg->set_timeout(5000ms);
      auto reduce = pg->allreduce(big);
      pg->set_timeout(1000ms);
      auto barrier = pg->barrier();
      std::string barrier_error = error_of([&] { barrier->wait(20s); });
      CHECK_MESSAGE(contains(barrier_error, "gloo barrier #"), barrier_error);
      CHECK_MESSAGE(contains(barrier_error, "timeout 1000 ms"), barrier_error);
      // The allreduce finished before the barrier's timeout (every element is
      // 3), or the teardown stopped it: then it names itself, never a hang.
      std::string reduce_error = error_of([&] { reduce->wait(20s); });
      if (reduce_error == "(no error)") {
        CHECK(big.sum().item<float>() == 3.0f * static_cast<float>(3 << 20));
      } else {
        CHECK_MESSAGE(contains(reduce_error, "gloo allreduce #"), reduce_error);
        CHECK_MESSAGE(!contains(reduce_error, "did not complete within"), reduce_error);
      }
      std::string next = error_of([&] { pg->allreduce(warm)->wait(20s); });
      CHECK_MESSAGE(contains(next, "unusable after an earlier failure"), next);
      reduce.reset();
      barrier.reset();
      big = ls::Tensor();
      pg.reset();
    }
    touch_memory_after_teardown();
  }, 90s);
  expect_every_rank_ok(results, 3);
}

TEST_CASE("process_group: a failed group's point-to-point ops fail at once too") {
  auto results = ls::testing::launch_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s));
    ls::Tensor t = ls::ones({256});
    pg->allreduce(t)->wait(20s);
    if (rank == 1) {
      std::this_thread::sleep_for(3s);  // never posts the matching send
      return;
    }
    pg->set_timeout(800ms);
    std::string msg = error_of([&] { pg->recv(t, 1, 7)->wait(20s); });
    CHECK_MESSAGE(contains(msg, "recv"), msg);
    CHECK_MESSAGE(contains(msg, "timeout 800 ms"), msg);
    std::string next = error_of([&] { pg->send(t, 1, 8)->wait(20s); });
    CHECK_MESSAGE(contains(next, "unusable after an earlier failure"), next);
  }, 60s);
  REQUIRE(results.size() == 2);
  for (const auto& r : results) CHECK_MESSAGE(r.ok(), r.describe());
}
