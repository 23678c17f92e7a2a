// distributed/ddp/deterministic_reduction.h — a reduction whose result does
// not depend on the bucket layout, the backend's chunking or the run: every
// gradient element is summed in rank order 0, 1, ..., N-1.
//
// § Note [Deterministic reduction]
// Floating-point addition is not associative, so an AllReduce's result depends
// on the order in which it adds the ranks' contributions. Gloo's ring splits a
// buffer into N segments and each segment starts its running sum at a
// different rank; a bucket of another size moves an element into another
// segment and so into another summation order (and Gloo's and MPI's large-
// message algorithms chunk by size too). Parameters after training then
// differ in the last bits between bucket_cap_mb values, which makes
// "bitwise identical across runs and configurations" impossible.
// DDPOptions().deterministic(true) replaces each bucket's AllReduce with an
// AllGather of the (already 1/divisor-scaled) bucket and a local sum in rank
// order: element e of the result is ((x0[e] + x1[e]) + x2[e]) + ... on every
// rank, whatever the bucket size, the backend or the world's timing. Elementwise
// additions are exact functions of their operands, so the bits are fixed.
// Cost: an AllGather receives (N-1)/N * N * B bytes per rank for a bucket of B
// bytes, against 2 (N-1)/N * B for a ring AllReduce: N/2 times the traffic (the
// same at N = 2, twice at 4), plus an N * B gather buffer and the N-1 local
// additions. bench_ddp --deterministic 1 measures it.
// DDP uses it itself (reducer_launch.cpp); the same path is a communication hook
// for DDP without the option: comm_hooks::deterministic_allreduce_hook
// (distributed/comm_hooks/deterministic_hook.h), which is why it lives here, below
// the hooks, and not among them (the layer graph has no cycle: Note [Layer graph]).
// Read before: distributed/process_group/tensor_future.h, distributed/ddp/comm_hook.h.
// Read next: distributed/ddp/reducer_launch.h (DDP's own use of it).
#pragma once

#include "distributed/process_group/process_group.h"
#include "distributed/process_group/tensor_future.h"

namespace lockstep::distributed {

// Starts an AllGather of `flat` (1-D) and returns a future whose value is the
// rank-ordered sum of all ranks' `flat`, written into `flat` itself.
TensorFuture rank_ordered_sum(ProcessGroup& process_group, Tensor flat);

}  // namespace lockstep::distributed
