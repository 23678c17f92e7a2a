// tests/support/compare.h — how far one tensor is from another, for kernel
// tests that compare a fast path with its reference.
// Read before: core/tensor.h. Used by tests/core/test_conv_*.cpp.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

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

}  // namespace lockstep::testing
