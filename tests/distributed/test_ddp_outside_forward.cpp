// tests/distributed/test_ddp_outside_forward.cpp — issue #42: a module also run (and
// backpropagated) outside ddp.forward in one iteration gives its parameters a second
// gradient; DDP's error names that mistake first (it blamed activation checkpointing,
// which the program did not use).
// Read before: distributed/ddp/reducer.cpp (mark_variable_ready).
#include <doctest/doctest.h>

#include "distributed/distributed.h"
#include "tests/distributed/ddp_test_models.h"
#include "tests/support/errors.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;

TEST_CASE("ddp: a forward outside ddp.forward in the same iteration is named as the likely cause") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    ls::manual_seed(0);
    auto model = std::make_shared<ls::testing::BranchyMLP>();
    dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().bucket_cap_mb(0));
    ls::manual_seed(7 + rank);
    const ls::Tensor x = ls::randn({4, 6});  // (4, 6)
    // One iteration: DDP's backward, then a second backward through the bare module.
    ddp.forward(x, true).sum().backward();
    const std::string message = ls::testing::error_of([&] { model->forward(x, true).sum().backward(); });
    CHECK_MESSAGE(ls::testing::contains(message, "received a gradient twice"), message);
    CHECK_MESSAGE(ls::testing::contains(message, "also used outside ddp.forward in this iteration"), message);
  }, std::chrono::seconds(60));
}
