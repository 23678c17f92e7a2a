// distributed/process_group/reduce_kernels.h — the element-wise reductions collectives apply
// when they combine two ranks' buffers: out = a (op) b, for every ReduceOp and
// every dtype a ProcessGroup reduces (f32, f64, f16, bf16, i64).
//
// Backends hand these to the transport: Gloo calls them on each received
// segment, MPI wraps the f16/bf16 ones in a user-defined MPI_Op. f16/bf16 are
// combined in f32 and rounded back after every step (like PyTorch's Gloo
// group), so a SUM over N ranks rounds N-1 times. AVG is SUM on the wire and a
// division by the world size at the end (divide_in_place), because a pairwise
// "average" is not associative. Integer AVG truncates toward zero.
// Read before: distributed/process_group/process_group.h. Read next:
// distributed/process_group/process_group_gloo.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "distributed/process_group/process_group.h"

namespace lockstep::distributed::detail {

// out[i] = a[i] (op) b[i] for i < n; out may alias a or b. AVG reduces as SUM.
using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

// The reduction for (dtype, op); throws ls::Error naming `collective` for a dtype
// no backend reduces (int32, uint8, bool).
ReduceFn reduce_function(ScalarType dtype, ReduceOp op, const char* collective);

// True for the dtypes allreduce / reduce_scatter accept.
bool is_reducible(ScalarType dtype);

// data[i] /= divisor for n elements of `dtype` (the second half of AVG).
void divide_in_place(void* data, ScalarType dtype, int64_t n, int64_t divisor);

}  // namespace lockstep::distributed::detail
