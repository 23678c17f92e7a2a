// distributed/ddp/ddp_debug.h — DDP's debug mode: LOCKSTEP_DISTRIBUTED_DEBUG=INFO|DETAIL
// (PyTorch's TORCH_DISTRIBUTED_DEBUG), what each level prints, and the parsing.
//
// § Note [DDP debug levels]
//   OFF (unset, "", "0", "OFF")  nothing.
//   INFO ("INFO", "1", "ON")     rank 0 prints DDP's bucket layout to stderr at
//        construction and again after the rebuild from the traced order: each
//        bucket's size and its parameters by name, in launch order. The process
//        groups also check every collective's kind, dtype, size and op across ranks
//        before its data moves (Note [Collective fingerprints],
//        distributed/process_group/collective_check.h), which any non-OFF value turns on.
//   DETAIL ("DETAIL")            INFO on every rank, plus, after each synced
//        backward with find_unused_parameters or static_graph, the parameters that
//        got no gradient on this rank and those unused on every rank, by name.
// Case does not matter; any other value is an error naming the variable.
// Read before: distributed/ddp/reducer.h. Read next: distributed/ddp/ddp_progress.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "distributed/ddp/bucket.h"

namespace lockstep::distributed::detail {

enum class DDPDebugLevel { OFF, INFO, DETAIL };

// The level LOCKSTEP_DISTRIBUTED_DEBUG asks for; throws ls::Error for an unknown value.
DDPDebugLevel ddp_debug_level();

// "DDP (rank R): 3 buckets (when), 0.12 MB of gradients, in launch order:\n
//    bucket 0: 0.00 MB, 2 parameters: fc2.bias, fc2.weight\n ..."
std::string describe_bucket_layout(const std::vector<Bucket>& buckets, const std::vector<std::string>& names,
                                   const std::vector<Tensor>& params, int rank, const std::string& when);

// "DDP (rank R): backward #K: 2 parameter(s) got no gradient on this rank: 'a', 'b'; 1 unused on
// every rank: 'a'\n", from the local and the summed used-parameter bitmaps (DETAIL).
std::string describe_unused_parameters(const std::vector<int64_t>& local_used, const std::vector<int64_t>& global_used,
                                       const std::vector<std::string>& names, int rank, int64_t backward);

// "'a', 'b', ..." — at most 20 names, then how many in all (for errors).
std::string quoted_names(const std::vector<std::string>& names, const std::vector<size_t>& indices);

}  // namespace lockstep::distributed::detail
