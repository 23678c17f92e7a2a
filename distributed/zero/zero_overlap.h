// distributed/zero/zero_overlap.h — hook_with_zero_step: run a
// ZeroRedundancyOptimizer's shard steps from DDP's Reducer, bucket by bucket,
// as soon as each bucket is reduced (PyTorch's ddp_zero_hook.py, without its
// restrictions: any comm hook, from the first iteration).
//
//   ZeroRedundancyOptimizer opt(model->parameters(), pg, optim::AdamWOptions(1e-3),
//                               ZeroOptions().overlap_with_ddp(true));
//   hook_with_zero_step(ddp, opt);   // once, before the first backward
//   for (...) { ddp.forward(x)...backward(); opt.step(); opt.zero_grad(); }
//
// backward() returns with every shard stepped and its broadcast started;
// opt.step() leaves each layer of the DDP module to wait for its parameters'
// broadcasts in the next forward (hook_with_zero_step registers the forward
// pre-hooks: Note [ZeRO broadcasts overlap the next forward]; step() must
// be called after every synced backward, before the next forward: the next
// backward refuses otherwise).
// The optimizer and the DDP module must hold the same parameters (refused
// otherwise), and the optimizer must outlive the DDP module's backward passes.
// Combinations: no_sync (step only after the synced backward; a step with no
// synced backward since the last is refused), find_unused_parameters,
// gradient_as_bucket_view, static_graph, deterministic and every comm hook
// (allreduce, fp16, bf16, PowerSGD, a user's) work, exactly as plain DDP with
// them; join() is refused; clip_grad_norm_ is refused (Note [ZeRO
// clip_grad_norm_]). Why the result equals plain DDP: Note [ZeRO overlap with
// DDP] in zero_overlap.cpp. With ZeroOptions().shard_gradients(true) (ZeRO-2)
// DDP also reduces each gradient only to its owner (Note [ZeRO-2 buckets]);
// comm hooks, deterministic mode and gradient_as_bucket_view are refused then.
// When the optimizer hands_over_in_pieces() (by default with a broadcast group
// of its own) DDP reduces in pieces and hands each bucket over as the pieces
// arrive (Note [Handing a bucket over in pieces]); with a comm hook,
// deterministic mode or find_unused_parameters buckets go whole, as before.
// Read before: distributed/zero/zero_redundancy_optimizer.h, distributed/ddp/reducer.h.
// Read next: distributed/zero/zero_overlap.cpp, distributed/zero/zero_sharded_gradients.h.
#pragma once

#include <memory>

#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/zero/zero_redundancy_optimizer.h"
#include "distributed/zero/zero_sharded_gradients.h"

namespace lockstep::distributed {

namespace detail {
// The Reducer's bucket-reduced hook for `zero` (checks the pairing first).
BucketHandover::BucketReducedHook zero_step_hook(const Reducer& reducer, ZeroRedundancyOptimizerBase& zero);
// Under ZeRO-2: the owner rank of each of the Reducer's parameters.
std::vector<int> gradient_owners(const Reducer& reducer, const ZeroRedundancyOptimizerBase& zero);
}  // namespace detail

// The Reducer plug-in (Note [Reducer plug-ins]): the bucket hand-over, or ZeRO-2's.
template <class M>
void hook_with_zero_step(DistributedDataParallel<M>& ddp, ZeroRedundancyOptimizerBase& zero) {
  BucketHandover::BucketReducedHook hook = detail::zero_step_hook(ddp.reducer(), zero);
  const double piece_mb = zero.hands_over_in_pieces() ? zero.zero_options().broadcast_piece_mb() : 0.0;
  const auto piece_bytes = static_cast<int64_t>(piece_mb * (1 << 20));  // Note [Handing a bucket over in pieces]
  if (zero.zero_options().shard_gradients()) {
    ddp.attach_reducer_plugin(std::make_unique<ShardedGradients>(std::move(hook), piece_bytes,
                                                                 detail::gradient_owners(ddp.reducer(), zero)));
  } else {
    register_bucket_reduced_hook(ddp, std::move(hook), piece_bytes);
  }
  // Note [ZeRO broadcasts overlap the next forward] (zero_forward_waits.cpp).
  if (zero.zero_options().defer_broadcast_waits()) zero.register_forward_waits(*ddp.module());
}

}  // namespace lockstep::distributed
