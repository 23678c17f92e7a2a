// distributed/comm_hooks/deterministic_hook.cpp — the bucket divided, then
// summed in rank order (Note [Deterministic reduction]).
// Read before: distributed/comm_hooks/deterministic_hook.h.
#include "distributed/comm_hooks/deterministic_hook.h"

#include "core/native/native.h"

namespace lockstep::distributed::comm_hooks {

TensorFuture deterministic_allreduce_hook(ProcessGroup& process_group, GradBucket& bucket) {
  Tensor buffer = bucket.buffer();  // (numel)
  native::binary_scalar_(native::BinaryOp::Mul, buffer, 1.0 / bucket.divisor());
  return rank_ordered_sum(process_group, buffer);
}

}  // namespace lockstep::distributed::comm_hooks
