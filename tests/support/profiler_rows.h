// tests/support/profiler_rows.h — the profiler's row of an op by name, for tests that
// check a row's time or bytes (Note [Profiler bytes] in core/profiler.h).
// Read before: core/profiler.h. Used by tests/autograd/test_profiler_bytes.cpp and the
// fused batch-norm tests.
#pragma once

#include <string>
#include <vector>

#include "core/profiler.h"

namespace lockstep::testing {

// The entry named `name` in rows (profiler::entries()), or null.
inline const profiler::Entry* find_entry(const std::vector<profiler::Entry>& rows,
                                         const std::string& name) {
  for (const auto& e : rows) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

}  // namespace lockstep::testing
