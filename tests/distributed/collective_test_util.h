// tests/distributed/collective_test_util.h — inputs with exactly known results
// for collective tests, and the checks that compare a rank's tensor with them.
//
// Rank r's element i is 1 + (i + r) % 3: small integers, so every reduction
// over up to 4 ranks (sums <= 12, products <= 81, averages in quarters) is
// exact in every dtype, f16 and bf16 included — the tests compare exactly.
// Read before: distributed/process_group/process_group.h. Used by:
// tests/distributed/test_process_group*.cpp.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/tensor.h"
#include "distributed/process_group/process_group.h"

namespace lockstep::testing {

inline const std::vector<ScalarType>& reducible_dtypes() {
  static const std::vector<ScalarType> d = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64};
  return d;
}
inline const std::vector<distributed::ReduceOp>& all_reduce_ops() {
  using distributed::ReduceOp;
  static const std::vector<ReduceOp> ops = {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::MAX, ReduceOp::MIN,
                                            ReduceOp::PRODUCT};
  return ops;
}

inline double rank_value(int rank, int64_t i) { return 1.0 + static_cast<double>((i + rank) % 3); }

// Rank `rank`'s input: n elements of `dtype`, shifted by `offset` elements.
inline Tensor rank_input(int rank, int64_t n, ScalarType dtype, int64_t offset = 0) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = rank_value(rank, i + offset);
  return tensor(v, {n}).to(dtype);
}

// op over ranks 0..world-1 of element i, as the dtype would hold it.
inline double reduced_value(distributed::ReduceOp op, int world, int64_t i, ScalarType dtype) {
  using distributed::ReduceOp;
  double acc = rank_value(0, i);
  for (int r = 1; r < world; ++r) {
    const double x = rank_value(r, i);
    if (op == ReduceOp::SUM || op == ReduceOp::AVG) acc += x;
    if (op == ReduceOp::PRODUCT) acc *= x;
    if (op == ReduceOp::MAX) acc = std::max(acc, x);
    if (op == ReduceOp::MIN) acc = std::min(acc, x);
  }
  if (op == ReduceOp::AVG) acc = dtype == kInt64 ? std::trunc(acc / world) : acc / world;
  return acc;
}

// CHECKs that t holds reduced_value(op, world, i + offset) at every i; reports the first miss.
inline void check_reduced(const Tensor& t, distributed::ReduceOp op, int world, const std::string& what,
                          int64_t offset = 0) {
  std::vector<double> got = t.to(kFloat64).to_vector<double>();
  int64_t bad = -1;
  for (int64_t i = 0; i < static_cast<int64_t>(got.size()) && bad < 0; ++i) {
    if (got[i] != reduced_value(op, world, i + offset, t.dtype())) bad = i;
  }
  CHECK_MESSAGE(bad < 0, what << " (" << dtype_name(t.dtype()) << ", " << distributed::reduce_op_name(op)
                                << "): element " << bad << " is " << (bad < 0 ? 0.0 : got[bad]) << ", expected "
                                << (bad < 0 ? 0.0 : reduced_value(op, world, bad + offset, t.dtype())));
}

}  // namespace lockstep::testing
