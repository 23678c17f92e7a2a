// tests/distributed/test_nccl_backend.cpp — init_process_group("nccl") on a
// machine or build without a GPU gives an error that says why and what to do;
// in a CUDA build with a GPU it gives a working NCCL group. (The NCCL backend
// itself is tested on the GPU: tests/cuda/test_cuda_ddp.cpp.)
// Read before: distributed/init.h, distributed/process_group/cuda/process_group_nccl.h.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "core/device.h"
#include "core/factory.h"
#include "distributed/distributed.h"
#include "tests/support/errors.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;

TEST_CASE("init_process_group(\"nccl\") explains a CPU-only build or a missing GPU, else works") {
  const auto options = dist::InitOptions().rank(0).world_size(1).store(std::make_shared<dist::HashStore>());
#if !LOCKSTEP_WITH_CUDA
  const std::string err = ls::testing::error_of([&] { dist::init_process_group("nccl", options); });
  INFO(err);
  CHECK(ls::testing::contains(err, "linked without lockstep's CUDA library"));
  CHECK(ls::testing::contains(err, "lockstep::cuda"));
  CHECK(ls::testing::contains(err, "-DLOCKSTEP_CUDA=ON"));
  CHECK(ls::testing::contains(err, "\"gloo\""));
#else
  if (!ls::cuda::is_available()) {
    const std::string err = ls::testing::error_of([&] { dist::init_process_group("nccl", options); });
    INFO(err);
    CHECK(ls::testing::contains(err, "no CUDA device is visible"));
    CHECK(ls::testing::contains(err, "\"gloo\""));
  } else {
    auto pg = dist::init_process_group("nccl", options);
    REQUIRE(pg != nullptr);
    CHECK(pg->backend_name() == "nccl");
    ls::Tensor t = ls::tensor(std::vector<float>{1.5f, -2.0f});  // a CPU tensor: staged (Note [NCCL host tensors])
    pg->allreduce(t)->wait();
    CHECK(t.to_vector<float>() == std::vector<float>{1.5f, -2.0f});
  }
#endif
}
