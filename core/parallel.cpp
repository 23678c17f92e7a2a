// core/parallel.cpp — thread-count control over OpenMP.
// Read before: core/parallel.h.
#include "core/parallel.h"

#include <omp.h>

#include "core/error.h"

namespace lockstep {

void set_num_threads(int n) {
  LS_CHECK(n >= 1, "set_num_threads: expected at least 1 thread, got ", n);
  omp_set_num_threads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

namespace detail {
bool in_parallel_region() { return omp_in_parallel() != 0; }
}  // namespace detail

}  // namespace lockstep
