// distributed/zero/zero_partition.cpp — the greedy largest-first partition of
// Note [ZeRO partition].
// Read before: distributed/zero/zero_partition.h.
#include "distributed/zero/zero_partition.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace lockstep::distributed {

ZeroPartition partition_parameters(const std::vector<Tensor>& params, int world) {
  LS_CHECK(world >= 1, "ZeroRedundancyOptimizer: the world size must be >= 1, got ", world);
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
  ZeroPartition out;
  out.owner.assign(params.size(), 0);
  out.owned.assign(static_cast<size_t>(world), {});
  out.elements.assign(static_cast<size_t>(world), 0);
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
