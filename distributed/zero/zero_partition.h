// distributed/zero/zero_partition.h — which rank owns (steps, keeps the
// optimizer state of) which parameter under ZeroRedundancyOptimizer.
//
// Note [ZeRO partition]
// Parameters are dealt to ranks greedily, largest first, each onto the rank
// with the fewest elements so far: ties between parameters of equal size go
// by parameter index (lower first), ties between equally loaded ranks to the
// lower rank. The result depends only on the parameter sizes and the world
// size, so every rank computes the same partition without communicating, and
// a run restarted at the same world size gets it back (sharded state dicts
// rely on that). One parameter larger than 1/N of the total simply fills its
// rank; the others share the rest. A rank may own nothing (more ranks than
// parameters).
// Read before: distributed/zero/zero_redundancy_optimizer.h.
// Read next: distributed/zero/zero_redundancy_optimizer.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace lockstep::distributed {

struct ZeroPartition {
  std::vector<int> owner;                       // per parameter: its rank
  std::vector<std::vector<size_t>> owned;       // per rank: its parameters, ascending
  std::vector<int64_t> elements;                // per rank: elements owned
};

// Note [ZeRO partition]. `world` >= 1.
ZeroPartition partition_parameters(const std::vector<Tensor>& params, int world);

}  // namespace lockstep::distributed
