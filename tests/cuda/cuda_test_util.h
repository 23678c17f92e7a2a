// tests/cuda/cuda_test_util.h — helpers of the CUDA tests: random CPU inputs of
// any dtype, the check that a CUDA result equals the CPU reference, and the
// short names every CUDA test file uses (declared once here, at the end).
// Read before: tests/cuda/main.cpp (Note [Skipping gpu tests]).
#pragma once

#include <doctest/doctest.h>

#include "core/factory.h"
#include "core/native/native.h"
#include "core/tensor.h"

namespace lockstep::testing {

inline Device cuda0() { return Device::cuda(0); }

// Random values on the CPU: normal floats, small integers (negatives for signed
// types), a mix of true/false for bool.
inline Tensor random_cpu(const IntList& shape, ScalarType dtype) {
  switch (dtype) {
    case kFloat32:
    case kFloat64:
    case kFloat16:
    case kBFloat16: return native::to_dtype(randn(shape), dtype);
    case kInt64:
    case kInt32: return native::to_dtype(randint(-7, 8, shape), dtype);
    case kUInt8: return native::to_dtype(randint(0, 15, shape), dtype);
    case kBool: return native::compare_scalar(native::CompareOp::Gt, randn(shape), 0.0);
  }
  return Tensor();
}

inline Tensor on_cuda(const Tensor& t) { return native::to_device(t, cuda0()); }

// `got` (on the GPU) has want's shape and dtype and, back on the host, its
// values within rtol/atol (exactly for integer and bool dtypes).
inline void check_matches(const Tensor& got, const Tensor& want, double rtol = 1e-5,
                          double atol = 1e-6) {
  REQUIRE(got.defined());
  CHECK(got.device() == cuda0());
  REQUIRE(got.sizes() == want.sizes());
  REQUIRE(got.dtype() == want.dtype());
  const Tensor host = native::to_device(got, Device::cpu());
  if (is_floating_point(want.dtype())) {
    CHECK(native::allclose(host, want, rtol, atol));
  } else {
    CHECK(native::equal(host, want));
  }
}

}  // namespace lockstep::testing

// The names the CUDA test files use (test code only: this header is never part of the library).
namespace ls = lockstep;
using ls::IntList;
using ls::Tensor;
using ls::testing::check_matches;
using ls::testing::cuda0;
using ls::testing::on_cuda;
using ls::testing::random_cpu;
