// tests/core/test_cuda_info.cpp — what a program sees of CUDA without a usable
// GPU: in a CPU-only build (core/cuda_info.cpp) no device exists and asking for
// one is an error that says the build lacks CUDA support; in a CUDA build the
// device queries agree with each other, and without a GPU a CUDA factory call
// fails with a clear error instead of crashing.
// Read before: core/device.h, core/cuda_info.cpp.
#include <doctest/doctest.h>

#include "core/factory.h"
#include "tests/support/errors.h"

namespace ls = lockstep;

#if !LOCKSTEP_WITH_CUDA
TEST_CASE("a CPU-only build has no CUDA device and says so when one is asked for") {
  CHECK_FALSE(ls::cuda::is_available());
  CHECK(ls::cuda::device_count() == 0);
  const std::string err = ls::testing::error_of(
      [] { ls::zeros({2}, ls::TensorOptions().device(ls::Device::cuda(0))); });
  CHECK(ls::testing::contains(err, "CUDA support"));
  const std::string to = ls::testing::error_of([] { ls::zeros({2}).to(ls::Device::cuda(0)); });
  CHECK(ls::testing::contains(to, "CUDA support"));
}
#else
TEST_CASE("a CUDA build's device queries agree, and a missing device is a clear error") {
  CHECK(ls::cuda::is_available() == (ls::cuda::device_count() > 0));
  const int missing = ls::cuda::device_count();  // one past the last device
  const std::string err = ls::testing::error_of(
      [&] { ls::zeros({2}, ls::TensorOptions().device(ls::Device::cuda(missing))); });
  CHECK(ls::testing::contains(err, "cuda:" + std::to_string(missing)));
  CHECK(ls::testing::contains(err, "does not exist"));
}
#endif
