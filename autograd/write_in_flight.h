// autograd/write_in_flight.h — a tensor whose values are still being written
// asynchronously (a collective receiving into it): an op that reads it fails
// with its writer's message instead of computing with the old values.
//
//   autograd::mark_write_in_flight(p, "ZeroRedundancyOptimizer (rank 1): parameter 3 ...");
//   ... the receive lands ...
//   autograd::unmark_write_in_flight(p);
//
// § Note [Reads of a tensor still being written]
// ZeroRedundancyOptimizer returns from step() with the broadcasts of the updated
// parameters still on the wire; each layer's forward pre-hook waits for its own
// (Note [ZeRO broadcasts overlap the next forward], distributed/zero/
// zero_forward_waits.cpp). A program that reads such a parameter some other way
// before that forward — a checksum, a functional forward that bypasses the layer —
// would compute with the old values. So the parameter's storage is marked here
// while its receive is in flight, and every differentiable op checks its inputs
// at its entry into autograd (compute_requires_grad, which each op calls with all
// of its inputs, in and out of grad mode) and throws an ls::Error carrying the
// writer's message (ZeRO's names wait_for_broadcasts()). The op's kernel has run
// by then, but its result never reaches the program: no silent wrong value.
// - The mark is on the storage, so every view of the tensor, old or new, is
//   covered; nothing in core storage changes: the writer (a communication thread
//   filling the memory, or the copy that lands packed values) goes through no
//   op, so no bypass is needed, for a thread or otherwise.
// - Cost: one acquire load per op while nothing is marked; while something is
//   (ZeRO's forward), a lookup per input under a mutex.
// - Caught (tests/autograd/test_write_in_flight.cpp, one check each): every op
//   that enters autograd — arithmetic (also with an integer scalar), unary math,
//   softmax, reductions (sum, mean, max), matmul, views and reshapes (view,
//   reshape, transpose, narrow, select/[], index_select), clone, to(dtype), cat,
//   where, and the nn ops (linear, embedding, layer_norm, conv2d ...), in or
//   out of grad mode.
// - Not caught: what core computes without entering autograd — item() and
//   to_vector() of the tensor itself, data_ptr()/raw_data(), printing (<<),
//   ls::equal, ls::allclose, comparisons (eq ... ge), argmax/argmin, the tensor
//   as the source of an in-place op on another tensor (other.copy_(p),
//   other.add_(p) ...), nn::save_tensors of the tensor itself, a collective on
//   it, and core/native kernels called directly. Why: those functions live in
//   core (core/tensor_inl.h, core/tensor_methods.cpp, core/printing.cpp,
//   core/native/) and reach the memory through StorageImpl::data() without
//   passing any entry above core; core links nothing above it, and the one
//   point they all share is core itself, so a check there would put the
//   mechanism back into core (PyTorch catches them with a tensor subclass at
//   its dispatcher, an entry above its kernels that lockstep does not have).
//   detach() reads nothing and shares the storage, so its later ops are caught.
//   A write in place (p.mul_, p.copy_(q)) is not refused at the op either; the
//   writer catches it when the receive lands (ZeRO compares the version
//   counter and fails the landing). The rest is documented for the user
//   (docs/api.md: call wait_for_broadcasts() first); the second test case
//   there pins this list.
// Read before: autograd/function.h. Read next: distributed/zero/zero_forward_waits.cpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace lockstep::autograd {

// Marks t's storage as being written until unmark_write_in_flight(t); an op that
// reads it throws an ls::Error with `message` (who writes it, what to call to wait).
// Marks count: a storage marked twice stays marked until unmarked twice.
void mark_write_in_flight(const Tensor& t, std::string message);
void unmark_write_in_flight(const Tensor& t);
bool write_in_flight(const Tensor& t);

// How many storages are marked, over all threads (the fast path's one load).
extern std::atomic<int64_t> storages_written_in_flight;
void check_no_write_in_flight_slow(const std::vector<Tensor>& inputs);

// Throws for the first input whose storage is marked.
inline void check_no_write_in_flight(const std::vector<Tensor>& inputs) {
  if (storages_written_in_flight.load(std::memory_order_acquire) != 0) check_no_write_in_flight_slow(inputs);
}

}  // namespace lockstep::autograd
