// tests/support/compare.h — how far one tensor is from another, for kernel
// tests that compare a fast path with its reference.
// Read before: core/tensor.h. Used by tests/core/test_conv_*.cpp and the fused batch-norm
// tests.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/native/native.h"
#include "core/tensor.h"

namespace lockstep::testing {

// max |a - b| / max |b| over all elements (same element count required).
inline double relative_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  REQUIRE(av.size() == bv.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    diff = std::max(diff, std::abs(av[i] - bv[i]));
    scale = std::max(scale, std::abs(bv[i]));
  }
  return diff / scale;
}

// Whether a and b (bf16 or float32, either memory order) hold the same values bit for
// bit, element by element in logical order: the check of a fast path meant to equal
// its reference exactly.
inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  const Tensor ac = native::contiguous(a), bc = native::contiguous(b);
  const bool bf16 = a.dtype() == kBFloat16;
  const void* p = bf16 ? static_cast<const void*>(ac.data_ptr<BFloat16>())
                       : static_cast<const void*>(ac.data_ptr<float>());
  const void* q = bf16 ? static_cast<const void*>(bc.data_ptr<BFloat16>())
                       : static_cast<const void*>(bc.data_ptr<float>());
  return std::memcmp(p, q, ac.nbytes()) == 0;
}

}  // namespace lockstep::testing
