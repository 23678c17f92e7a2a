// tests/support/backend_scope.h — switches the process-wide GEMM backend
// (core/native/gemm.h) for one scope, so a test runs a fast path and its
// reference on the same inputs.
// Read before: core/native/gemm.h. Used by tests/core/test_bf16_kernels.cpp.
#pragma once

#include "core/native/gemm.h"

namespace lockstep::testing {

struct GemmBackendScope {
  native::GemmBackend saved = native::gemm_backend();
  explicit GemmBackendScope(native::GemmBackend b) { native::set_gemm_backend(b); }
  ~GemmBackendScope() { native::set_gemm_backend(saved); }
};

}  // namespace lockstep::testing
