// core/parallel.h — intra-op threads.
//
// ls::set_num_threads(n) sets how many threads one op may use (OpenMP, shared
// with oneDNN and Eigen). parallel_for splits [begin, end) into chunks of at
// least `grain` iterations; small loops run inline on the calling thread.
// Read before: core/tensor.h. Read next: core/native/native.h.
#pragma once

#include <algorithm>
#include <cstdint>

namespace lockstep {

void set_num_threads(int n);
int get_num_threads();

namespace detail {
bool in_parallel_region();
}

// fn(chunk_begin, chunk_end) over disjoint chunks covering [begin, end).
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& fn) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  const int threads = get_num_threads();
  if (threads <= 1 || n <= grain || detail::in_parallel_region()) {
    fn(begin, end);
    return;
  }
  const int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t lo = begin + n * c / chunks;
    int64_t hi = begin + n * (c + 1) / chunks;
    fn(lo, hi);
  }
}

}  // namespace lockstep
