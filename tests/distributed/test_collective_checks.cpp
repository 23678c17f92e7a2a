// tests/distributed/test_collective_checks.cpp — every collective is checked across ranks by
// default (Note [Collective fingerprints], Note [Fingerprints posted at issue]):
// a collective that differs in dtype, size, op, kind or root on one rank, at any
// position in the sequence, is an ls::Error on every rank naming both ranks'
// calls, well within the timeout — never a sum of wrong bytes, an abort inside
// Gloo, or a timeout blaming a dead peer. Also: many checked collectives in
// flight at once still reduce right, collectives issued behind a mismatch fail
// cleanly, and LOCKSTEP_COLLECTIVE_CHECKS=0 / malformed values.
// Read before: distributed/process_group/collective_check.h,
// distributed/process_group/process_group_gloo_fingerprints.h.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/factory.h"
#include "distributed/init.h"
#include "distributed/process_group/process_group_gloo.h"
#include "distributed/store/prefix_store.h"
#include "tests/distributed/collective_test_util.h"
#include "tests/support/errors.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;
using dist::ReduceOp;
using lockstep::testing::contains;
using lockstep::testing::error_of;

namespace {

// A fresh Gloo group (default options: checks on) per call, over the test's store;
// a mismatch leaves its group unusable.
struct Groups {
  dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(20s));
  int next = 0;
  std::unique_ptr<dist::ProcessGroupGloo> make() {
    auto store = std::make_shared<dist::PrefixStore>("checks" + std::to_string(next++), info.store);
    dist::ProcessGroupGloo::Options options;
    options.timeout = 20s;
    return std::make_unique<dist::ProcessGroupGloo>(store, info.rank, info.world_size, options);
  }
};

// Runs a barrier (collective #0, always checked), then `issue` as collective #1,
// and returns its error; CHECKs it came well before the 20 s timeout.
std::string second_collective_error(Groups& groups,
                                    const std::function<std::shared_ptr<dist::Work>(dist::ProcessGroup&)>& issue) {
  auto pg = groups.make();
  pg->barrier()->wait(20s);
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg = error_of([&] { issue(*pg)->wait(20s); });
  CHECK_MESSAGE(std::chrono::steady_clock::now() - t0 < 10s, msg);
  return msg;
}

}  // namespace

TEST_CASE("collective checks: a dtype and size mismatch after a barrier is an error naming both calls (default)") {
  ls::testing::run_ranks(2, [](int rank) {
    Groups groups;
    // The issue's case: float32[4] on rank 0, float64[2] on rank 1 — once summed into 5.75 and 25.0.
    ls::Tensor t = rank == 0 ? ls::ones({4}) : ls::ones({2}, ls::TensorOptions().dtype(ls::kFloat64));
    std::string msg = second_collective_error(groups, [&](dist::ProcessGroup& pg) { return pg.allreduce(t); });
    CHECK_MESSAGE(contains(msg, "mismatched collectives (dtype, number of elements differ)"), msg);
    CHECK_MESSAGE(contains(msg, rank == 0 ? "rank 0 issued allreduce #1 of 4 float32, SUM but rank 1 issued "
                                            "allreduce #1 of 2 float64, SUM"
                                          : "rank 1 issued allreduce #1 of 2 float64, SUM but rank 0 issued "
                                            "allreduce #1 of 4 float32, SUM"), msg);
  }, 60s);
}

TEST_CASE("collective checks: size, op, kind and root mismatches are errors, not aborts or wrong sums") {
  ls::testing::run_ranks(2, [](int rank) {
    Groups groups;
    // Different sizes once aborted rank 0 inside Gloo (EnforceNotMet, SIGABRT).
    ls::Tensor sized = ls::ones({rank == 0 ? 4 : 2});
    std::string size_msg = second_collective_error(groups, [&](dist::ProcessGroup& pg) { return pg.allreduce(sized); });
    CHECK_MESSAGE(contains(size_msg, "(number of elements differ)"), size_msg);
    // SUM against MAX once gave 10 on both ranks.
    ls::Tensor t = ls::ones({8});
    std::string op_msg = second_collective_error(groups, [&](dist::ProcessGroup& pg) {
      return pg.allreduce(t, rank == 0 ? ReduceOp::SUM : ReduceOp::MAX);
    });
    CHECK_MESSAGE(contains(op_msg, "(reduce op differ)"), op_msg);
    CHECK_MESSAGE(contains(op_msg, rank == 0 ? "rank 1 issued allreduce #1 of 8 float32, MAX"
                                             : "rank 0 issued allreduce #1 of 8 float32, SUM"), op_msg);
    // Another kind and another root once hung until the timeout, blaming a dead peer.
    std::string kind_msg = second_collective_error(groups, [&](dist::ProcessGroup& pg) {
      return rank == 0 ? pg.barrier() : pg.broadcast(t, 0);
    });
    CHECK_MESSAGE(contains(kind_msg, rank == 0 ? "issued broadcast #1 of 8 float32, root 0" : "issued barrier #1"),
                  kind_msg);
    std::string root_msg = second_collective_error(groups, [&](dist::ProcessGroup& pg) {
      return pg.broadcast(t, rank);  // each rank thinks it is the root
    });
    CHECK_MESSAGE(contains(root_msg, "(root differ)"), root_msg);
    CHECK_MESSAGE(contains(root_msg, "rank " + std::to_string(1 - rank) + " issued broadcast #1 of 8 float32, root " +
                                         std::to_string(1 - rank)), root_msg);
    // allgather and reduce_scatter carry theirs too.
    ls::Tensor in = ls::ones({rank == 0 ? 3 : 5});
    std::vector<ls::Tensor> outs;
    std::string gather_msg = second_collective_error(groups, [&](dist::ProcessGroup& pg) { return pg.allgather(outs, in); });
    CHECK_MESSAGE(contains(gather_msg, "allgather #1 of " + std::to_string(rank == 0 ? 5 : 3) + " float32"), gather_msg);
  }, 90s);
}

TEST_CASE("collective checks: three ranks, one differs late: every rank names the odd call, and later work fails cleanly") {
  ls::testing::run_ranks(3, [](int rank) {
    Groups groups;
    auto pg = groups.make();
    ls::Tensor t = ls::ones({16});
    for (int k = 0; k < 5; ++k) pg->allreduce(t)->wait(20s);  // #0..#4 agree
    ls::Tensor odd = ls::ones({rank == 2 ? 17 : 16});
    auto bad = pg->allreduce(odd);  // #5
    // Issued behind the mismatch before anyone waited: their posted exchanges must go away safely.
    std::vector<std::shared_ptr<dist::Work>> behind;
    for (int k = 0; k < 3; ++k) behind.push_back(pg->allreduce(t));
    std::string msg = error_of([&] { bad->wait(20s); });
    CHECK_MESSAGE(contains(msg, rank == 2 ? "issued allreduce #5 of 16 float32" : "rank 2 issued allreduce #5 of 17 float32"),
                  msg);
    for (auto& w : behind) {
      std::string later = error_of([&] { w->wait(20s); });
      CHECK_MESSAGE(!later.empty(), "a collective issued behind a mismatch succeeded");
    }
  }, 60s);
}

TEST_CASE("collective checks: hundreds of checked collectives in flight reduce right, beside point-to-point") {
  ls::testing::run_ranks(2, [](int rank) {
    Groups groups;
    auto pg = groups.make();
    std::vector<ls::Tensor> tensors;
    std::vector<std::shared_ptr<dist::Work>> works;
    for (int k = 0; k < 300; ++k) {
      tensors.push_back(ls::testing::rank_input(rank, 1 + k % 37, k % 2 ? ls::kFloat64 : ls::kFloat32));
      works.push_back(pg->allreduce(tensors.back()));
      if (k % 50 == 0) {  // point-to-point in between is not fingerprinted and does not disturb the sequence
        ls::Tensor msg = ls::full({3}, static_cast<double>(k));
        works.push_back(rank == 0 ? pg->send(msg, 1, k) : pg->recv(msg, 0, k));
        works.back()->wait(20s);
        CHECK(msg.sum().item<float>() == 3.0f * k);
      }
    }
    for (auto& w : works) w->wait(20s);
    for (size_t k = 0; k < tensors.size(); ++k) ls::testing::check_reduced(tensors[k], ReduceOp::SUM, 2, "in flight");
  }, 60s);
}

TEST_CASE("collective checks: LOCKSTEP_COLLECTIVE_CHECKS=0 checks only the first collective; bad values are errors") {
  ls::testing::run_ranks(2, [](int rank) {
    setenv("LOCKSTEP_COLLECTIVE_CHECKS", "0", 1);
    Groups groups;
    {
      auto pg = groups.make();
      ls::Tensor odd = ls::ones({rank == 0 ? 3 : 4});
      std::string first = error_of([&] { pg->allreduce(odd)->wait(20s); });
      CHECK_MESSAGE(contains(first, "(number of elements differ)"), first);
    }
    {
      auto pg = groups.make();
      pg->barrier()->wait(20s);
      ls::Tensor t = ls::ones({8});
      // Unchecked: SUM against MAX runs (this is what the default check prevents).
      pg->allreduce(t, rank == 0 ? ReduceOp::SUM : ReduceOp::MAX)->wait(20s);
      CHECK(t.sum().item<float>() > 8.0f);
    }
    setenv("LOCKSTEP_COLLECTIVE_CHECKS", "yes", 1);
    std::string bad = error_of([&] { groups.make(); });
    CHECK_MESSAGE(contains(bad, "LOCKSTEP_COLLECTIVE_CHECKS='yes' is not 0 or 1"), bad);
  }, 60s);
}
