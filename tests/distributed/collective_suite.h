// tests/distributed/collective_suite.h — one body that runs every collective of a
// ProcessGroup (allreduce with every ReduceOp, reduce_scatter with every ReduceOp,
// reduce and broadcast to / from every root, allgather, send/recv around the ring, barrier) with
// every dtype (f32, f64, f16, bf16, i64) and compares each result with the answer
// computed locally. The Gloo, round-robin and MPI tests all call it, so every
// backend is held to the same list.
// Read before: tests/distributed/collective_test_util.h.
// Used by: tests/distributed/test_process_group.cpp, test_process_group_mpi.cpp.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/factory.h"
#include "distributed/process_group/process_group.h"
#include "tests/distributed/collective_test_util.h"

namespace lockstep::testing {

inline std::vector<double> as_doubles(const Tensor& t) { return t.to(kFloat64).to_vector<double>(); }

// Every rank of `pg` must call this at the same point. `label` names the backend in failures.
inline void check_every_collective(distributed::ProcessGroup& pg, const std::string& label,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  using distributed::ReduceOp;
  using distributed::Work;
  const int rank = pg.rank(), world = pg.size();
  for (ScalarType dtype : reducible_dtypes()) {
    const std::string what = label + " " + dtype_name(dtype);
    INFO(what);
    // allreduce, every op, all five in flight at once.
    std::vector<Tensor> reduced;
    std::vector<std::shared_ptr<Work>> works;
    for (ReduceOp op : all_reduce_ops()) {
      reduced.push_back(rank_input(rank, 7, dtype));
      works.push_back(pg.allreduce(reduced.back(), op));
    }
    for (size_t k = 0; k < works.size(); ++k) {
      works[k]->wait(timeout);
      CHECK(works[k]->is_success());
      check_reduced(reduced[k], all_reduce_ops()[k], world, what + " allreduce");
    }
    // reduce_scatter: inputs[j] holds elements [3j, 3j+3) of this rank's sequence;
    // rank r receives block r reduced over the ranks.
    for (ReduceOp op : all_reduce_ops()) {
      std::vector<Tensor> inputs;
      for (int j = 0; j < world; ++j) inputs.push_back(rank_input(rank, 3, dtype, 3 * j));
      Tensor out = empty({3}, TensorOptions().dtype(dtype));
      pg.reduce_scatter(out, inputs, op)->wait(timeout);
      check_reduced(out, op, world, what + " reduce_scatter", 3 * rank);
    }
    // reduce to every root, every op: the root holds the reduction (the
    // others' tensors are scratch); several large enough to take Gloo's
    // multi-segment path (over 1 MiB).
    for (int root = 0; root < world; ++root) {
      for (ReduceOp op : all_reduce_ops()) {
        Tensor t = rank_input(rank, 9, dtype, root);
        pg.reduce(t, root, op)->wait(timeout);
        if (rank == root) check_reduced(t, op, world, what + " reduce to root " + std::to_string(root), root);
      }
    }
    if (dtype == kFloat32) {
      const int64_t n = 600 * 1000;  // 2.4 MB
      Tensor big = full({n}, static_cast<double>(rank + 1), TensorOptions().dtype(dtype));
      pg.reduce(big, world - 1, ReduceOp::SUM)->wait(timeout);
      if (rank == world - 1) {
        const double want = world * (world + 1) / 2.0;
        CHECK_MESSAGE(big.min().item<double>() == want, what << " large reduce");
        CHECK_MESSAGE(big.max().item<double>() == want, what << " large reduce");
      }
    }
    // broadcast from every root.
    for (int root = 0; root < world; ++root) {
      Tensor t = rank_input(rank, 5, dtype);
      pg.broadcast(t, root)->wait(timeout);
      CHECK_MESSAGE(as_doubles(t) == as_doubles(rank_input(root, 5, dtype)), what << " broadcast from root " << root);
    }
    // allgather into an empty vector (the group allocates one tensor per rank).
    std::vector<Tensor> gathered;
    pg.allgather(gathered, rank_input(rank, 4, dtype))->wait(timeout);
    REQUIRE(static_cast<int>(gathered.size()) == world);
    for (int r = 0; r < world; ++r) {
      CHECK(gathered[r].dtype() == dtype);
      CHECK_MESSAGE(as_doubles(gathered[r]) == as_doubles(rank_input(r, 4, dtype)), what << " allgather slot " << r);
    }
    // send/recv around the ring, paired like blocking calls: rank 0 sends
    // first, everyone else receives first.
    if (world >= 2) {
      const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
      const int tag = 10 + static_cast<int>(dtype);
      Tensor mine = rank_input(rank, 6, dtype, 100);
      Tensor got = zeros({6}, TensorOptions().dtype(dtype));
      if (rank == 0) {
        pg.send(mine, next, tag)->wait(timeout);
        pg.recv(got, prev, tag)->wait(timeout);
      } else {
        pg.recv(got, prev, tag)->wait(timeout);
        pg.send(mine, next, tag)->wait(timeout);
      }
      CHECK_MESSAGE(as_doubles(got) == as_doubles(rank_input(prev, 6, dtype, 100)), what << " recv from rank " << prev);
    }
  }
  auto barrier = pg.barrier();
  barrier->wait(timeout);
  CHECK(barrier->is_success());
}

}  // namespace lockstep::testing
