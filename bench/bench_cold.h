// bench/bench_cold.h — timing a kernel as a training step meets it: every operand in
// memory, none in cache. flush_caches() writes a buffer larger than any L2 + L3 seen
// on these machines (384 MB: the 260 MB L3 of the first one); cold_ms(fn) flushes,
// then times one call of fn in wall-clock ms.
// Read before: bench/bench_stats.h. Read next: bench/bench_batch_norm.cpp.
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

namespace lockstep::bench {

inline void flush_caches() {
  static std::vector<float> buffer(size_t{96} << 20);  // 384 MB
  for (size_t i = 0; i < buffer.size(); i += 16) buffer[i] += 1.0f;
}

template <class F>
double cold_ms(F&& fn) {
  flush_caches();
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace lockstep::bench
