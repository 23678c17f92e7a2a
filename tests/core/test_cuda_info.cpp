// tests/core/test_cuda_info.cpp — what a program sees of CUDA without a usable
// GPU: linked without lockstep's CUDA library (core/cuda_info.cpp, Note [CUDA hooks])
// no device exists and asking for one is an error that names lockstep::cuda; in a CUDA build the
// device queries agree with each other, and without a GPU a CUDA factory call
// fails with a clear error instead of crashing.
// Read before: core/device.h, core/cuda_info.cpp.
#include <doctest/doctest.h>

#include <string>

#include "core/factory.h"
#if LOCKSTEP_WITH_CUDA
#include "core/cuda/cublas_library.h"
#include "core/native/cuda_kernels.h"
#endif
#include "tests/support/errors.h"

namespace ls = lockstep;

#if !LOCKSTEP_WITH_CUDA
TEST_CASE("a program without lockstep's CUDA library has no CUDA device and says so when one is asked for") {
  CHECK_FALSE(ls::cuda::is_available());
  CHECK(ls::cuda::device_count() == 0);
  const std::string err = ls::testing::error_of(
      [] { ls::zeros({2}, ls::TensorOptions().device(ls::Device::cuda(0))); });
  CHECK(ls::testing::contains(err, "linked without lockstep's CUDA library"));
  CHECK(ls::testing::contains(err, "lockstep::cuda"));
  const std::string to = ls::testing::error_of([] { ls::zeros({2}).to(ls::Device::cuda(0)); });
  CHECK(ls::testing::contains(to, "linked without lockstep's CUDA library"));
  CHECK(ls::testing::contains(to, "COMPONENTS CUDA"));
}
#else
TEST_CASE("a CUDA build opens cuBLAS on first use and finds every entry point it calls") {
  // Note [cuBLAS loaded on first use]: no GPU is needed to open the library.
  const ls::cuda::CublasLibrary& lib = ls::cuda::cublas_library();
  CHECK(lib.path.find("libcublas.so.") == 0);
  CHECK((lib.create != nullptr));
  CHECK((lib.set_stream != nullptr));
  CHECK((lib.set_pointer_mode != nullptr));
  CHECK((lib.set_math_mode != nullptr));
  CHECK((lib.gemm_ex != nullptr));
  CHECK((lib.gemm_strided_batched_ex != nullptr));
  REQUIRE((lib.status_string != nullptr));
  CHECK(std::string(lib.status_string(CUBLAS_STATUS_SUCCESS)).size() > 0);
  CHECK(&ls::cuda::cublas_library() == &lib);  // opened once
}

TEST_CASE("a CUDA build's device queries agree, and a missing device is a clear error") {
  CHECK(ls::cuda::is_available() == (ls::cuda::device_count() > 0));
  const int missing = ls::cuda::device_count();  // one past the last device
  const std::string err = ls::testing::error_of(
      [&] { ls::zeros({2}, ls::TensorOptions().device(ls::Device::cuda(missing))); });
  CHECK(ls::testing::contains(err, "cuda:" + std::to_string(missing)));
  CHECK(ls::testing::contains(err, "does not exist"));
  CHECK_FALSE(ls::testing::contains(err, "linked without"));
}

TEST_CASE("a program linking lockstep::cuda has the CUDA hooks registered: its archive is linked whole") {
  // Note [CUDA hooks]: nothing references the registrars, so only a whole-archive link keeps them.
  REQUIRE(ls::detail::cuda_hooks_or_null<ls::CudaRuntimeHooks>() != nullptr);
  const ls::native::CudaKernels& kernels = ls::native::cuda_kernels("test");
#define LS_CHECK_KERNEL_SLOT(name) CHECK_MESSAGE((kernels.name != nullptr), #name);
  LS_CUDA_KERNELS(LS_CHECK_KERNEL_SLOT)
#undef LS_CHECK_KERNEL_SLOT
  CHECK((kernels.sgd_step_ != nullptr));
}
#endif
