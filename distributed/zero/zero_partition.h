// distributed/zero/zero_partition.h — which rank owns (steps, keeps the
// optimizer state of) which parameter under ZeroRedundancyOptimizer.
//
// § Note [ZeRO partition]
// Parameters are dealt to ranks greedily, largest first, each onto the rank
// with the fewest elements so far: ties between parameters of equal size go
// by parameter index (lower first), ties between equally loaded ranks to the
// lower rank. The result depends only on the parameter sizes and the world
// size, so every rank computes the same partition without communicating, and
// a run restarted at the same world size gets it back (sharded state dicts
// rely on that). One parameter larger than 1/N of the total simply fills its
// rank; the others share the rest. A rank may own nothing (more ranks than
// parameters).
//
// § Note [ZeRO split parameters]
// A contiguous parameter of more than `split_bytes` (ZeroOptions().
// split_parameters_mb()) is not dealt whole: it is SPLIT, every rank owning a
// slice of its flattened elements — rank r the range [r·s, min((r+1)·s,
// numel)), s = numel / N rounded up to a multiple of 64 — so that no single
// rank steps and broadcasts all of it. With the overlap the last gradient of
// backward is on the critical path: BERT's word embeddings (89 MB) stepped by
// one owner, then broadcast, were most of the optimizer's time left after
// backward; split, every rank steps 1/N and the N slices travel side by side.
// Split parameters are placed first (each rank's load starts with its slice),
// then the others are dealt as above. The update is element-wise (Note
// [Stepping a subset], optim/optimizer.h), so stepping slices is the same
// arithmetic as stepping the whole. With N = 1, or when the rounding would
// leave a rank an empty slice (a parameter of a few hundred elements), it is
// not split.
// Read before: distributed/zero/zero_redundancy_optimizer.h.
// Read next: distributed/zero/zero_redundancy_optimizer.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace lockstep::distributed {

// owner[i] of a split parameter (Note [ZeRO split parameters]).
inline constexpr int kEveryRank = -1;

struct ZeroPartition {
  std::vector<int> owner;                       // per parameter: its rank, or kEveryRank (split)
  std::vector<std::vector<size_t>> owned;       // per rank: its parameters (split ones too), ascending
  std::vector<int64_t> elements;                // per rank: elements owned (slices counted)
  std::vector<int64_t> numel;                   // per parameter: its elements
  std::vector<int64_t> slice_numel;             // per parameter: s of a split one, 0 otherwise

  bool split(size_t i) const { return owner[i] == kEveryRank; }
  // Elements [begin, begin + length) of parameter i's flattened values that
  // rank r steps: all of them for its owner, r's slice of a split one, none otherwise.
  struct Range {
    int64_t begin = 0, length = 0;
  };
  Range range(size_t i, int r) const;
};

// Note [ZeRO partition], Note [ZeRO split parameters]. `world` >= 1;
// split_bytes 0: nothing is split.
ZeroPartition partition_parameters(const std::vector<Tensor>& params, int world, int64_t split_bytes = 0);

}  // namespace lockstep::distributed
