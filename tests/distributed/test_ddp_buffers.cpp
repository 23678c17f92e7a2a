// tests/distributed/test_ddp_buffers.cpp — Note [Coalesced buffer broadcast]: the
// coalesced broadcast (a few flat collectives) leaves every rank with the
// source's values, exactly as the reference (one broadcast per tensor) does, for
// mixed dtypes, a strided tensor, an empty one and flat tensors split by the cap;
// and DDP's forward gives every rank rank 0's BatchNorm buffers.
// Read before: distributed/ddp/coalesced_broadcast.h.
#include <doctest/doctest.h>

#include "core/grad_mode.h"
#include "distributed/ddp/coalesced_broadcast.h"
#include "distributed/distributed.h"
#include "tests/distributed/ddp_test_models.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;

namespace {

constexpr auto kTimeout = std::chrono::seconds(60);

// Tensors whose values depend on `rank`: float32, int64, float64, a transposed
// (strided) float32 view and an empty float32.
std::vector<ls::Tensor> rank_tensors(int rank) {
  const double r = rank + 1;
  ls::Tensor strided_base = ls::arange(0, 12, 1, ls::TensorOptions().dtype(ls::kFloat32)).view({3, 4}) * r;
  return {ls::arange(0, 6, 1, ls::TensorOptions().dtype(ls::kFloat32)).view({2, 3}) * r,
          ls::arange(0, 5, 1, ls::TensorOptions().dtype(ls::kInt64)) * static_cast<int64_t>(rank + 7),
          ls::full({4}, 0.25 * r, ls::TensorOptions().dtype(ls::kFloat64)),
          strided_base.transpose(0, 1),  // (4, 3), not contiguous
          ls::full({0}, r),
          ls::full({3}, -r)};
}

void check_all_equal(const std::vector<ls::Tensor>& got, const std::vector<ls::Tensor>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].dtype() == want[i].dtype());
    CHECK(ls::equal(got[i], want[i]));
  }
}

}  // namespace

TEST_CASE("ddp: the coalesced broadcast gives every rank the source's values, like one broadcast per tensor") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    for (int source : {0, 1}) {
      const std::vector<ls::Tensor> expected = rank_tensors(source);
      std::vector<ls::Tensor> reference = rank_tensors(rank);
      dist::detail::broadcast_each(*pg, reference, source, pg->timeout());
      check_all_equal(reference, expected);
      std::vector<ls::Tensor> coalesced = rank_tensors(rank);
      dist::detail::broadcast_coalesced(*pg, coalesced, source, pg->timeout());
      check_all_equal(coalesced, reference);
      // A cap below one tensor's size: one flat tensor per tensor; a small cap: some share.
      for (double cap_mb : {0.0, 40.0 / (1024 * 1024)}) {
        std::vector<ls::Tensor> capped = rank_tensors(rank);
        dist::detail::CoalescedBroadcast broadcast(*pg, capped, source, cap_mb);
        CHECK(broadcast.works().size() >= 3);  // at least one a dtype
        CHECK(broadcast.works().size() <= capped.size());
        for (const auto& w : broadcast.works()) w->wait(pg->timeout());
        broadcast.finish();
        check_all_equal(capped, reference);
      }
      // Without a cap: one flat tensor a dtype.
      std::vector<ls::Tensor> whole = rank_tensors(rank);
      CHECK(dist::detail::CoalescedBroadcast(*pg, whole, source).works().size() == 3);
      pg->barrier()->wait(pg->timeout());  // the line above issued broadcasts: let them finish
    }
  }, kTimeout);
}

TEST_CASE("ddp: a synced forward gives every rank rank 0's BatchNorm buffers") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    ls::manual_seed(0);
    auto model = std::make_shared<ls::testing::TinyCNN>();
    dist::DistributedDataParallel ddp(model, pg);
    model->eval();  // BatchNorm reads its running statistics and leaves them as they are
    // Each rank's own statistics (rank 0's are the ones to end with).
    {
      ls::NoGradGuard no_grad;
      model->bn1->running_mean.fill_(0.5 + rank);
      model->bn1->running_var.fill_(2.0 + rank);
      model->bn1->num_batches_tracked.fill_(10 + rank);
    }
    ddp.forward(ls::randn({4, 3, 8, 8})).sum().backward();  // broadcasts the buffers first
    CHECK(ls::equal(model->bn1->running_mean, ls::full({4}, 0.5)));
    CHECK(ls::equal(model->bn1->running_var, ls::full({4}, 2.0)));
    CHECK(model->bn1->num_batches_tracked.item<int64_t>() == 10);
  }, kTimeout);
}
