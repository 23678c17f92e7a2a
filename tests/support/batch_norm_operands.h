// tests/support/batch_norm_operands.h — operands of the fused batch-norm kernel tests: a
// random channels-last bfloat16 activation, and one batch norm's tensors with running
// statistics that a test can copy before each run (the kernels update them in place).
// Read before: core/native/batch_norm_pair.h (BatchNormTensors). Used by
// tests/core/test_batch_norm_pair.cpp and tests/core/test_batch_norm_relu_pool.cpp.
#pragma once

#include "core/factory.h"
#include "core/native/batch_norm_pair.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/rng.h"

namespace lockstep::testing {

// randn(sizes) * scale + offset, as a channels-last bfloat16 (N, C, H, W) tensor.
inline Tensor cl_bf16(const IntList& sizes, double scale, double offset) {
  return native::channels_last(native::to_dtype(randn(sizes) * scale + offset, kBFloat16));
}

// One batch norm's weight, bias and running statistics (C each).
struct Bn {
  Tensor w, b, rm, rv;
  native::BatchNormTensors tensors() const { return {w, b, rm, rv}; }
  Bn clone() const { return {w, b, rm.clone(), rv.clone()}; }  // running statistics copied
};

}  // namespace lockstep::testing
