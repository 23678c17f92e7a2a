// tests/distributed/test_collective_checks.cpp — every collective is checked across ranks by
// default (Note [Collective fingerprints], Note [Batched fingerprints]):
// a collective that differs in dtype, size, op, kind or root on one rank, at any
// position in the sequence, is an ls::Error on every rank naming both ranks'
// calls, well within the timeout — never a sum of wrong bytes, an abort inside
// Gloo, or a timeout blaming a dead peer — over TCP (the batched exchanges) and
// in shared memory. Also: many checked collectives in flight at once still
// reduce right, a mismatch inside a burst is blamed on its own collective,
// collectives issued behind a mismatch fail cleanly, LOCKSTEP_COLLECTIVE_CHECKS=0
// and malformed values, the ledger's bookkeeping without ranks, and the check
// over a host group that the NCCL backend uses.
// Read before: distributed/process_group/collective_check.h,
// distributed/process_group/fingerprint_ledger.h,
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
#include "distributed/process_group/collective_check.h"
#include "distributed/process_group/fingerprint_ledger.h"
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
// a mismatch leaves its group unusable. shared_memory = false: every collective
// over TCP, checked by the batched exchanges.
struct Groups {
  explicit Groups(bool shared_memory = true) : shared_memory(shared_memory) {}
  bool shared_memory;
  dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(20s));
  int next = 0;
  std::unique_ptr<dist::ProcessGroupGloo> make() {
    auto store = std::make_shared<dist::PrefixStore>("checks" + std::to_string(next++), info.store);
    dist::ProcessGroupGloo::Options options;
    options.timeout = 20s;
    options.shared_memory = shared_memory;
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
  for (bool shm : {false, true}) {
    CAPTURE(shm);
    ls::testing::run_ranks(2, [shm](int rank) {
      Groups groups(shm);
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
}

TEST_CASE("collective checks: size, op, kind and root mismatches are errors, not aborts or wrong sums") {
  for (bool shm : {false, true}) {
    CAPTURE(shm);
    ls::testing::run_ranks(2, [shm](int rank) {
      Groups groups(shm);
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
}

TEST_CASE("collective checks: three ranks, one differs late: every rank names the odd call, and later work fails cleanly") {
  for (bool shm : {false, true}) {
    CAPTURE(shm);
    ls::testing::run_ranks(3, [shm](int rank) {
      Groups groups(shm);
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
}

TEST_CASE("collective checks: hundreds of checked collectives in flight reduce right, beside point-to-point") {
  for (bool shm : {false, true}) {
    CAPTURE(shm);
    ls::testing::run_ranks(2, [shm](int rank) {
      Groups groups(shm);
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
}

TEST_CASE("collective checks: LOCKSTEP_COLLECTIVE_CHECKS=0 checks only the first collective, bad values are errors") {
  ls::testing::run_ranks(2, [](int rank) {
    setenv("LOCKSTEP_COLLECTIVE_CHECKS", "0", 1);
    Groups groups(false);  // over TCP: shared memory compares every chunk's fingerprint anyway, at no cost
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

TEST_CASE("collective checks: the ledger compares the range every rank sent and blames each collective alone") {
  using Ledger = dist::detail::FingerprintLedger;
  using dist::detail::CollectiveKind;
  ls::Tensor f32 = ls::ones({8});
  ls::Tensor f64 = ls::ones({8}, ls::TensorOptions().dtype(ls::kFloat64));
  std::vector<Ledger> ledgers;
  for (int r = 0; r < 3; ++r) ledgers.emplace_back(r, 3, "gloo");
  // Rank 0 has issued 5 collectives, rank 1 3, rank 2 4; #2 is float64 on rank 1; #1 is recorded
  // unchecked everywhere (a later piece) and differs on rank 2: not compared.
  for (int r = 0; r < 3; ++r) {
    const int issued = r == 0 ? 5 : r == 1 ? 3 : 4;
    for (int64_t seq = 0; seq < issued; ++seq) {
      auto f = dist::detail::make_fingerprint(seq, CollectiveKind::ALLREDUCE, r == 1 && seq == 2 ? &f64 : &f32, 0);
      if (seq == 1 && r == 2) f.numel = 3;
      ledgers[r].record(f, seq != 1);
    }
  }
  std::vector<Ledger::Message> all;
  for (auto& l : ledgers) all.push_back(l.outgoing());
  CHECK(all[0].count == 5);
  CHECK(all[0].bytes() < sizeof(Ledger::Message));  // a part carries only what it holds
  for (auto& l : ledgers) l.absorb(all);
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    CHECK(ledgers[r].covered(2));
    CHECK_FALSE(ledgers[r].covered(3));  // rank 1 had sent only #0..#2
    ledgers[r].verdict(0);
    ledgers[r].verdict(1);  // unchecked on every rank: not compared
    std::string msg = error_of([&] { ledgers[r].verdict(2); });
    CHECK_MESSAGE(contains(msg, "gloo allreduce: ranks issued mismatched collectives (dtype differ)"), msg);
    CHECK_MESSAGE(contains(msg, r == 1 ? "rank 1 issued allreduce #2 of 8 float64, SUM but rank 0 issued allreduce #2"
                                       : "but rank 1 issued allreduce #2 of 8 float64, SUM"), msg);
    ledgers[r].verdict(2);  // reported once
  }
  // The next exchange starts at #3 on every rank; a part from elsewhere is an error naming the ranks.
  ledgers[1].record(dist::detail::make_fingerprint(3, CollectiveKind::BARRIER), true);
  all.clear();
  for (auto& l : ledgers) all.push_back(l.outgoing());
  CHECK(all[2].first_seq == 3);
  all[2].first_seq = 4;
  std::string step = error_of([&] { ledgers[0].absorb(all); });
  CHECK_MESSAGE(contains(step, "rank 2 compared fingerprints from collective #4"), step);
  CHECK_MESSAGE(contains(error_of([&] { ledgers[0].verdict(7); }), "asked before it was compared"), "");
}

TEST_CASE("collective checks: a mismatch inside a burst of collectives over TCP is blamed on its own collective") {
  ls::testing::run_ranks(2, [](int rank) {
    Groups groups(false);
    auto pg = groups.make();
    std::vector<ls::Tensor> tensors;
    std::vector<std::shared_ptr<dist::Work>> works;
    for (int k = 0; k < 40; ++k) {  // issued back to back: few exchanges cover them all
      tensors.push_back(ls::testing::rank_input(rank, 5 + k, ls::kFloat32));
      works.push_back(pg->allreduce(tensors.back(), k == 25 && rank == 1 ? ReduceOp::MAX : ReduceOp::SUM));
    }
    for (int k = 0; k < 25; ++k) {
      works[k]->wait(20s);
      ls::testing::check_reduced(tensors[k], ReduceOp::SUM, 2, "before the mismatch");
    }
    std::string msg = error_of([&] { works[25]->wait(20s); });
    CHECK_MESSAGE(contains(msg, "(reduce op differ)"), msg);
    CHECK_MESSAGE(contains(msg, rank == 0 ? "rank 0 issued allreduce #25 of 30 float32, SUM but rank 1 issued "
                                            "allreduce #25 of 30 float32, MAX"
                                          : "rank 1 issued allreduce #25 of 30 float32, MAX but rank 0"), msg);
    for (int k = 26; k < 40; ++k) error_of([&] { works[k]->wait(20s); });  // behind it: done or failed, no hang
  }, 60s);
}

TEST_CASE("collective checks: one collective checked over a host group (the NCCL backend's way)") {
  ls::testing::run_ranks(2, [](int rank) {
    Groups groups(false);
    auto host = groups.make();
    using dist::detail::CollectiveKind;
    ls::Tensor t = ls::ones({rank == 0 ? 4 : 2});
    ls::Tensor same = ls::ones({6});
    dist::detail::check_across_ranks(*host, dist::detail::make_fingerprint(0, CollectiveKind::BROADCAST, &same, -1, 0),
                                     "nccl");
    std::string msg = error_of([&] {
      dist::detail::check_across_ranks(*host, dist::detail::make_fingerprint(1, CollectiveKind::ALLREDUCE, &t, 0), "nccl");
    });
    CHECK_MESSAGE(contains(msg, "nccl allreduce: ranks issued mismatched collectives (number of elements differ): rank " +
                                    std::to_string(rank) + " issued allreduce #1 of " + (rank == 0 ? "4" : "2")),
                  msg);
  }, 60s);
}
