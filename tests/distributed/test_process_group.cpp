// tests/distributed/test_process_group.cpp — every collective x every dtype x
// every ReduceOp on the Gloo backend and on round-robin groups of Gloo groups,
// 2 and 4 ranks as processes on loopback, against answers computed locally
// (tests/distributed/collective_suite.h); Gloo's large/chunked/ring paths; and
// the order round-robin keeps over K groups.
// Read before: distributed/process_group/process_group_gloo.h,
// tests/distributed/collective_suite.h,
// tests/support/multiprocess.h.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/factory.h"
#include "distributed/init.h"
#include "distributed/store/prefix_store.h"
#include "distributed/process_group/process_group_gloo.h"
#include "distributed/process_group/process_group_round_robin.h"
#include "tests/distributed/collective_suite.h"
#include "tests/distributed/collective_test_util.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;
using dist::ReduceOp;
using ls::testing::check_reduced;
using ls::testing::rank_input;

namespace {

std::shared_ptr<dist::ProcessGroup> gloo_group() {
  return dist::init_process_group("gloo", dist::InitOptions().timeout(20s));
}

// allreduce: every dtype and op on a small tensor (halving-doubling/BCube when
// the world is a power of two), and SUM/MAX on one above the ring threshold.
void allreduce_everything(int world) {
  ls::testing::run_ranks(world, [world](int rank) {
    auto pg = gloo_group();
    REQUIRE(pg->size() == world);
    REQUIRE(pg->rank() == rank);
    for (ls::ScalarType dtype : ls::testing::reducible_dtypes()) {
      std::vector<std::pair<ls::Tensor, ReduceOp>> issued;
      std::vector<std::shared_ptr<dist::Work>> works;
      for (ReduceOp op : ls::testing::all_reduce_ops()) {  // all in flight at once
        issued.emplace_back(rank_input(rank, 7, dtype), op);
        works.push_back(pg->allreduce(issued.back().first, op));
      }
      for (size_t k = 0; k < works.size(); ++k) {
        works[k]->wait(20s);
        CHECK(works[k]->is_success());
        check_reduced(issued[k].first, issued[k].second, world, "allreduce of 7");
        REQUIRE(works[k]->result().size() == 1);
        CHECK(works[k]->result()[0].is_same(issued[k].first));
      }
    }
    for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX}) {
      ls::Tensor big = rank_input(rank, 70001, ls::kFloat32);  // 280 KB: the ring path
      pg->allreduce(big, op)->wait(20s);
      check_reduced(big, op, world, "allreduce of 70001");
    }
    ls::Tensor empty = ls::empty({0});
    pg->allreduce(empty)->wait(20s);
    CHECK(empty.numel() == 0);
  }, 120s);
}

// Every collective with every dtype (tests/distributed/collective_suite.h), then
// what only Gloo's tests add: allgather of int32/uint8 and into given outputs.
void every_collective(int world) {
  ls::testing::run_ranks(world, [world](int rank) {
    auto pg = gloo_group();
    REQUIRE(pg->size() == world);
    ls::testing::check_every_collective(*pg, "gloo", 20s);
    for (ls::ScalarType dtype : {ls::kInt32, ls::kUInt8}) {
      std::vector<ls::Tensor> outputs;
      pg->allgather(outputs, rank_input(rank, 3, dtype))->wait(20s);
      REQUIRE(static_cast<int>(outputs.size()) == world);
      for (int r = 0; r < world; ++r) {
        CHECK(outputs[r].dtype() == dtype);
        CHECK(ls::testing::as_doubles(outputs[r]) == ls::testing::as_doubles(rank_input(r, 3, ls::kFloat64)));
      }
    }
    std::vector<ls::Tensor> given = {ls::zeros({2, 2})};
    for (int r = 1; r < world; ++r) given.push_back(ls::zeros({4}));
    pg->allgather(given, rank_input(rank, 4, ls::kFloat32).view({2, 2}))->wait(20s);
    CHECK(given[world - 1].to_vector<float>() == rank_input(world - 1, 4, ls::kFloat32).to_vector<float>());
  }, 120s);
}

// The same list through init_process_group's round-robin group over 2 Gloo groups:
// successive calls alternate between the groups, send/recv stay on the first.
void every_collective_round_robin(int world) {
  ls::testing::run_ranks(world, [world](int) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s).round_robin(2));
    REQUIRE(pg->backend_name() == "round_robin");
    REQUIRE(pg->size() == world);
    ls::testing::check_every_collective(*pg, "round_robin(2 x gloo)", 20s);
  }, 120s);
}

}  // namespace

TEST_CASE("process_group: gloo allreduce of every dtype and op on 2 ranks") { allreduce_everything(2); }
TEST_CASE("process_group: gloo allreduce of every dtype and op on 4 ranks") { allreduce_everything(4); }
TEST_CASE("process_group: gloo every collective and dtype on 2 ranks") { every_collective(2); }
TEST_CASE("process_group: gloo every collective and dtype on 4 ranks") { every_collective(4); }
TEST_CASE("process_group: round robin over 2 gloo groups runs every collective and dtype on 2 ranks") {
  every_collective_round_robin(2);
}
TEST_CASE("process_group: round robin over 2 gloo groups runs every collective and dtype on 4 ranks") {
  every_collective_round_robin(4);
}

TEST_CASE("process_group: gloo allreduce AVG on a non-power-of-two world uses the ring") {
  ls::testing::run_ranks(3, [](int rank) {
    auto pg = gloo_group();
    ls::Tensor t = rank_input(rank, 11, ls::kFloat32);
    pg->allreduce(t, ReduceOp::AVG)->wait(20s);
    check_reduced(t, ReduceOp::AVG, 3, "allreduce AVG over 3 ranks");
  }, 60s);
}

TEST_CASE("process_group: a large allreduce runs in pieces on several threads and completes as one Work") {
  ls::testing::run_ranks(2, [](int rank) {
    dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(20s));
    dist::ProcessGroupGloo::Options options;
    options.chunk_bytes = 1024;  // 256 floats (128 doubles) a piece
    options.shared_memory = false;  // the pieces are the TCP path's (Note [Large allreduce in chunks])
    dist::ProcessGroupGloo pg(info.store, info.rank, info.world_size, options);
    for (ReduceOp op : {ReduceOp::AVG, ReduceOp::MAX}) {
      ls::Tensor t = rank_input(rank, 1000, ls::kFloat32).view({10, 100});
      auto work = pg.allreduce(t, op);
      CHECK_MESSAGE(work->description().find("in 4 pieces") != std::string::npos, work->description());
      work->wait(20s);
      REQUIRE(work->result().size() == 1);
      CHECK(work->result()[0].is_same(t));
      check_reduced(t.view({1000}), op, 2, "allreduce in pieces");
    }
    ls::Tensor d = rank_input(rank, 300, ls::kFloat64);  // 3 pieces, the last one short
    pg.allreduce(d, ReduceOp::PRODUCT)->wait(20s);
    check_reduced(d, ReduceOp::PRODUCT, 2, "allreduce of f64 in pieces");
  }, 60s);
}

TEST_CASE("process_group: gloo send and recv pass a tensor around the ring") {
  const int world = 3;
  ls::testing::run_ranks(world, [=](int rank) {
    auto pg = gloo_group();
    const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
    ls::Tensor mine = rank_input(rank, 6, ls::kFloat32);
    ls::Tensor got = ls::zeros({6});
    // Blocking-style pairing: rank 0 sends first, everyone else receives first.
    if (rank == 0) {
      pg->send(mine, next, /*tag=*/7)->wait(20s);
      pg->recv(got, prev, 7)->wait(20s);
    } else {
      pg->recv(got, prev, 7)->wait(20s);
      pg->send(mine, next, 7)->wait(20s);
    }
    CHECK(got.to_vector<float>() == rank_input(prev, 6, ls::kFloat32).to_vector<float>());
    // Point-to-point traffic does not disturb the collectives' numbering.
    ls::Tensor t = rank_input(rank, 4, ls::kFloat32);
    pg->allreduce(t)->wait(20s);
    check_reduced(t, ReduceOp::SUM, world, "allreduce after send/recv");
  }, 60s);
}

TEST_CASE("process_group: round robin spreads interleaved collectives over K groups in order") {
  const int world = 2, groups = 3;
  ls::testing::run_ranks(world, [=](int rank) {
    dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(20s));
    std::vector<std::shared_ptr<dist::ProcessGroup>> gloo;
    for (int k = 0; k < groups; ++k) {
      auto store = std::make_shared<dist::PrefixStore>("rr" + std::to_string(k), info.store);
      gloo.push_back(std::make_shared<dist::ProcessGroupGloo>(store, info.rank, info.world_size));
    }
    dist::ProcessGroupRoundRobin pg(gloo);
    CHECK(pg.backend_name() == "round_robin");
    CHECK(pg.size() == world);
    // 24 collectives of changing sizes, kinds and ops, all in flight: call i goes
    // to group i % 3, so each group must still see its own calls in the same order
    // on both ranks (a misordering would pair different sizes and fail).
    std::vector<ls::Tensor> tensors;
    std::vector<std::shared_ptr<dist::Work>> works;
    for (int i = 0; i < 24; ++i) {
      tensors.push_back(rank_input(rank, 5 + 37 * i, ls::kFloat32, i));
      works.push_back(i % 4 == 3 ? pg.broadcast(tensors.back(), i % world)
                                 : pg.allreduce(tensors.back(), i % 2 ? ReduceOp::MAX : ReduceOp::SUM));
    }
    for (int i = 0; i < 24; ++i) {
      works[i]->wait(20s);
      if (i % 4 == 3) {
        CHECK(tensors[i].to_vector<float>() ==
              rank_input(i % world, 5 + 37 * i, ls::kFloat32, i).to_vector<float>());
      } else {
        check_reduced(tensors[i], i % 2 ? ReduceOp::MAX : ReduceOp::SUM, world, "round robin call", i);
      }
    }
    pg.barrier()->wait(20s);
  }, 60s);
}

TEST_CASE("process_group: init_process_group round_robin(K) builds a round-robin group") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s).round_robin(2));
    auto* rr = dynamic_cast<dist::ProcessGroupRoundRobin*>(pg.get());
    REQUIRE(rr != nullptr);
    CHECK(rr->groups().size() == 2);
    ls::Tensor t = rank_input(rank, 9, ls::kFloat32);
    pg->allreduce(t)->wait(20s);
    check_reduced(t, ReduceOp::SUM, 2, "allreduce through init round_robin");
  }, 60s);
}
