// tests/distributed/test_process_group_gloo_chunks.cpp — LOCKSTEP_GLOO_CHUNK_BYTES (the
// piece size of Note [Large allreduce in chunks], for DDP-iteration sweeps): a small
// piece size still gives the exact sum, and a malformed value is an error naming
// the variable.
// Read before: distributed/process_group/process_group_gloo.h.
#include <doctest/doctest.h>

#include <cstdlib>

#include "core/factory.h"
#include "distributed/distributed.h"
#include "tests/support/errors.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using lockstep::testing::error_of;

TEST_CASE("process_group: LOCKSTEP_GLOO_CHUNK_BYTES cuts an allreduce into pieces that sum exactly") {
  ls::testing::run_ranks(2, [](int rank) {
    ::setenv("LOCKSTEP_GLOO_CHUNK_BYTES", "1000", 1);  // 250 floats a piece: 1001 floats -> 5 pieces
    auto pg = dist::init_process_group("gloo");
    ls::Tensor t = ls::arange(0, 1001, 1, ls::TensorOptions().dtype(ls::kFloat32)) * static_cast<double>(rank + 1);
    pg->allreduce(t)->wait(pg->timeout());
    CHECK(ls::equal(t, ls::arange(0, 1001, 1, ls::TensorOptions().dtype(ls::kFloat32)) * 3.0));
  }, std::chrono::seconds(60));
}

TEST_CASE("process_group: a malformed LOCKSTEP_GLOO_CHUNK_BYTES is an error naming the variable") {
  ls::testing::run_ranks(2, [](int rank) {
    ::setenv("LOCKSTEP_GLOO_CHUNK_BYTES", rank == 0 ? "4M" : "0", 1);
    const std::string message = error_of([] { dist::init_process_group("gloo"); });
    INFO(message);
    CHECK(message.find("LOCKSTEP_GLOO_CHUNK_BYTES") != std::string::npos);
    CHECK(message.find("is not an integer between 1 and") != std::string::npos);
  }, std::chrono::seconds(60));
}
