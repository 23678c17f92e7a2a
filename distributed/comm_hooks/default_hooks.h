// distributed/comm_hooks/default_hooks.h — the simple built-in communication
// hooks (PyTorch's ddp_comm_hooks.default_hooks), each used as
//   ddp.register_comm_hook(pg, ls::distributed::comm_hooks::fp16_compress_hook);
// with the process group as the state.
//
// allreduce_hook: divide the bucket by bucket.divisor() and AllReduce it (SUM)
//   — exactly what DDP does without a hook, bit for bit.
// fp16_compress_hook / bf16_compress_hook: divide, cast the bucket to float16
//   (bfloat16), AllReduce in that precision (half the bytes on the wire), cast
//   the sum back into the bucket. Dividing first, in the bucket's precision,
//   keeps large gradient sums from overflowing float16. Result: each rank's
//   contribution rounded to 11 (8) significant bits, and the sum rounded once
//   more by the backend (Gloo and MPI add halves in float and round the result).
// Read before: distributed/ddp/comm_hook.h. Read next: distributed/comm_hooks/powersgd.h.
#pragma once

#include "distributed/ddp/comm_hook.h"
#include "distributed/process_group/process_group.h"

namespace lockstep::distributed::comm_hooks {

TensorFuture allreduce_hook(ProcessGroup& process_group, GradBucket& bucket);
TensorFuture fp16_compress_hook(ProcessGroup& process_group, GradBucket& bucket);
TensorFuture bf16_compress_hook(ProcessGroup& process_group, GradBucket& bucket);

}  // namespace lockstep::distributed::comm_hooks
