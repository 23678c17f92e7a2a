// core/native/pool_planes.h — the CPU pools' loop over (H, W) planes.
//
// An (N, C, H, W) input is N * C independent planes; max_pool2d (pool.cpp) and
// adaptive_avg_pool2d (pool_avg.cpp) hand them to threads in chunks of at least
// detail::kGrain elements.
// Read before: core/native/elementwise_loop.h. Read next: core/native/pool.cpp.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/native/elementwise_loop.h"
#include "core/parallel.h"

namespace lockstep::native::pool_detail {

// How many (H, W) planes of hw elements a parallel chunk takes at least.
inline int64_t plane_grain(int64_t hw) {
  return std::max<int64_t>(1, detail::kGrain / std::max<int64_t>(hw, 1));
}

// Calls fn(plane) for each of the `planes` (H, W) planes of hw elements, in parallel.
template <class F>
void for_each_plane(int64_t planes, int64_t hw, F&& fn) {
  parallel_for(0, planes, plane_grain(hw), [&](int64_t lo, int64_t hi) {
    for (int64_t plane = lo; plane < hi; ++plane) fn(plane);
  });
}

}  // namespace lockstep::native::pool_detail
