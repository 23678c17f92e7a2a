// bench/bench_stats.h — the statistic every benchmark reports: the median of its
// repetitions, which one slow repetition on a shared machine does not move; and its
// quantiles, for the spread (quartiles) beside it.
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

// The q-quantile of v, 0 <= q <= 1, interpolated linearly between the sorted values (numpy's
// default; q = 0.5 is the median); if_empty when v is empty.
inline double quantile(std::vector<double> v, double q, double if_empty = 0.0) {
  if (v.empty()) return if_empty;
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(at);
  if (lo + 1 >= v.size()) return v.back();
  return v[lo] + (at - static_cast<double>(lo)) * (v[lo + 1] - v[lo]);
}

}  // namespace lockstep::bench
