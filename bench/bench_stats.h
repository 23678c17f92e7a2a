// bench/bench_stats.h — the statistic every benchmark reports: the median of its
// repetitions, which one slow repetition on a shared machine does not move.
// Read before: nothing. Read next: bench/bench_step.cpp.
#pragma once

#include <algorithm>
#include <vector>

namespace lockstep::bench {

// The median of v (the mean of the middle two for an even count); if_empty when v is empty.
inline double median(std::vector<double> v, double if_empty = 0.0) {
  if (v.empty()) return if_empty;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace lockstep::bench
