// tests/distributed/test_bucket_assignment.cpp — the pure bucketing function:
// reverse registration order, (device, dtype) groups, small first bucket, caps.
#include <doctest/doctest.h>

#include "core/factory.h"
#include "distributed/ddp/bucket_assignment.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;

namespace {
// A float32 tensor of `kb` KiB.
ls::Tensor kib(int64_t kb, ls::ScalarType dtype = ls::kFloat32) {
  return ls::zeros({kb * 1024 / static_cast<int64_t>(ls::element_size(dtype))}, dtype);
}
}  // namespace

TEST_CASE("bucket assignment: reverse order, first bucket small, then the cap") {
  // 6 parameters of 512 KiB: first bucket (1 MB) takes the last two, then 2 MB buckets.
  std::vector<ls::Tensor> params;
  for (int i = 0; i < 6; ++i) params.push_back(kib(512));
  auto buckets = dist::compute_bucket_assignment(params, /*first_bucket_mb=*/1, /*cap=*/2);
  REQUIRE(buckets.size() == 2);
  CHECK(buckets[0].param_indices == std::vector<size_t>{5, 4});
  CHECK(buckets[1].param_indices == std::vector<size_t>{3, 2, 1, 0});
  CHECK(buckets[0].bytes == 1024 * 1024);
}

TEST_CASE("bucket assignment: bucket_cap_mb 0 gives one bucket per parameter") {
  std::vector<ls::Tensor> params = {kib(1), kib(2), kib(3)};
  auto buckets = dist::compute_bucket_assignment(params, 1, 0);
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[0].param_indices == std::vector<size_t>{2});
  CHECK(buckets[2].param_indices == std::vector<size_t>{0});
}

TEST_CASE("bucket assignment: a huge cap puts everything of one dtype together") {
  std::vector<ls::Tensor> params = {kib(4), kib(4), kib(4)};
  auto buckets = dist::compute_bucket_assignment(params, 1000, 1000);
  REQUIRE(buckets.size() == 1);
  CHECK(buckets[0].param_indices == std::vector<size_t>{2, 1, 0});
}

TEST_CASE("bucket assignment: dtypes never share a bucket") {
  std::vector<ls::Tensor> params = {kib(4, ls::kFloat32), kib(4, ls::kFloat64), kib(4, ls::kFloat32)};
  auto buckets = dist::compute_bucket_assignment(params, 1, 25);
  REQUIRE(buckets.size() == 2);
  for (const auto& b : buckets) {
    for (size_t i : b.param_indices) CHECK(params[i].dtype() == b.dtype);
  }
  // The float32 bucket holds the last parameter, so it launches first.
  CHECK(buckets[0].dtype == ls::kFloat32);
  CHECK(buckets[0].param_indices == std::vector<size_t>{2, 0});
  CHECK_THROWS_AS(dist::compute_bucket_assignment(params, 1, -1), ls::Error);
}
