// distributed/zero/zero_partition.cpp — the greedy largest-first partition of
// Note [ZeRO partition], with the split parameters of Note [ZeRO split parameters].
// Read before: distributed/zero/zero_partition.h.
#include "distributed/zero/zero_partition.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace lockstep::distributed {

ZeroPartition::Range ZeroPartition::range(size_t i, int r) const {
  if (split(i)) {
    const int64_t begin = std::min(numel[i], static_cast<int64_t>(r) * slice_numel[i]);
    return {begin, std::min(slice_numel[i], numel[i] - begin)};
  }
  return owner[i] == r ? Range{0, numel[i]} : Range{};
}

ZeroPartition partition_parameters(const std::vector<Tensor>& params, int world, int64_t split_bytes) {
  LS_CHECK(world >= 1, "ZeroRedundancyOptimizer: the world size must be >= 1, got ", world);
  LS_CHECK(split_bytes >= 0, "ZeroRedundancyOptimizer: the split threshold must be >= 0 bytes, got ", split_bytes);
  ZeroPartition out;
  out.owner.assign(params.size(), 0);
  out.owned.assign(static_cast<size_t>(world), {});
  out.elements.assign(static_cast<size_t>(world), 0);
  out.numel.assign(params.size(), 0);
  out.slice_numel.assign(params.size(), 0);
  std::vector<size_t> order;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t n = params[i].numel();
    out.numel[i] = n;
    // Note [ZeRO split parameters]: every rank a slice of s elements (the last one shorter, none empty).
    const int64_t s = ((n + world - 1) / world + 63) / 64 * 64;
    const bool split = world > 1 && split_bytes > 0 && static_cast<int64_t>(params[i].nbytes()) > split_bytes &&
                       (world - 1) * s < n &&
                       params[i].is_contiguous();
    if (!split) {
      order.push_back(i);
      continue;
    }
    out.owner[i] = kEveryRank;
    out.slice_numel[i] = s;
    for (int r = 0; r < world; ++r) {
      out.owned[static_cast<size_t>(r)].push_back(i);
      out.elements[static_cast<size_t>(r)] += out.range(i, r).length;
    }
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
  for (size_t i : order) {
    // The least-loaded rank; min_element keeps the first (lowest) rank on ties.
    const auto least = std::min_element(out.elements.begin(), out.elements.end());
    const int r = static_cast<int>(least - out.elements.begin());
    out.owner[i] = r;
    out.owned[static_cast<size_t>(r)].push_back(i);
    *least += params[i].numel();
  }
  for (auto& v : out.owned) std::sort(v.begin(), v.end());
  return out;
}

}  // namespace lockstep::distributed
