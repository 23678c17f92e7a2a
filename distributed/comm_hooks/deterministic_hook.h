// distributed/comm_hooks/deterministic_hook.h — DDP's deterministic reduction
// (Note [Deterministic reduction] in distributed/ddp/deterministic_reduction.h)
// as a communication hook: every gradient element summed in rank order.
// For DDP without DDPOptions().deterministic(true):
//   ddp.register_comm_hook(pg, comm_hooks::deterministic_allreduce_hook);
// Read before: distributed/ddp/deterministic_reduction.h, distributed/comm_hooks/default_hooks.h.
// Read next: distributed/comm_hooks/powersgd.h.
#pragma once

#include "distributed/ddp/comm_hook.h"
#include "distributed/ddp/deterministic_reduction.h"

namespace lockstep::distributed::comm_hooks {

// Divides the bucket by bucket.divisor(), then rank_ordered_sum of it.
TensorFuture deterministic_allreduce_hook(ProcessGroup& process_group, GradBucket& bucket);

}  // namespace lockstep::distributed::comm_hooks
