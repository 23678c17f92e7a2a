// bench/bench_cold.h — timing a kernel as a training step meets it: every operand in
// memory, none in cache. flush_caches() writes a buffer larger than any L2 + L3 seen
// on these machines (384 MB: the 260 MB L3 of the first one); cold_ms(fn) flushes,
// then times one call of fn in wall-clock ms; cold_medians(reps, fns) times each of fns
// once per rep, one after the other (so all see the same minutes of the machine), and
// returns each one's median ms.
// Read before: bench/bench_stats.h. Read next: bench/bench_batch_norm.cpp.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <functional>
#include <vector>

#include "bench/bench_stats.h"

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

template <size_t N>
std::array<double, N> cold_medians(int reps, const std::array<std::function<void()>, N>& fns) {
  std::array<std::vector<double>, N> t;
  for (int rep = 0; rep < reps; ++rep) {
    for (size_t k = 0; k < N; ++k) t[k].push_back(cold_ms(fns[k]));
  }
  std::array<double, N> m{};
  for (size_t k = 0; k < N; ++k) m[k] = median(t[k]);
  return m;
}

}  // namespace lockstep::bench
