// tests/distributed/test_ddp_autotune.cpp — DDPOptions().autotune_buckets(true)
// (Note [Bucket autotuning], distributed/ddp/bucket_autotune.h): the rule on
// synthetic measurements; the measured sizes; on 2 and 3 ranks the choice is
// identical everywhere, within bounds, applied to the buckets, and training
// still equals one process.
// Read before: distributed/ddp/bucket_autotune.h, tests/distributed/ddp_beyond_util.h.
#include <doctest/doctest.h>

#include "distributed/ddp/bucket_autotune.h"
#include "tests/distributed/ddp_beyond_util.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using CNN = ls::testing::TinyCNN;

namespace {

constexpr double kMB = 1024.0 * 1024.0;
constexpr int64_t kPerRank = 4;
constexpr int kSteps = 3;

}  // namespace

TEST_CASE("bucket autotune: the rule picks the sizes whose latency share is 10 and 50 percent") {
  // Exactly t = 100 us + S / (1 GB/s).
  std::vector<double> sizes, times;
  for (double s : {0.25 * kMB, kMB, 4 * kMB, 16 * kMB}) {
    sizes.push_back(s);
    times.push_back(1e-4 + s / 1e9);
  }
  const dist::BucketChoice c = dist::choose_bucket_sizes(sizes, times, 200 * kMB);
  CHECK(c.latency_us == doctest::Approx(100.0).epsilon(1e-6));
  CHECK(c.bandwidth_gbps == doctest::Approx(1.0).epsilon(1e-6));
  CHECK(c.bucket_cap_mb == doctest::Approx(9 * 1e-4 * 1e9 / kMB).epsilon(1e-6));  // 0.86 MB
  CHECK(c.first_bucket_mb == doctest::Approx(1e-4 * 1e9 / kMB).epsilon(1e-6));    // 0.095 MB
  // A slower network (1 ms latency) wants 10x larger buckets.
  for (size_t i = 0; i < sizes.size(); ++i) times[i] = 1e-3 + sizes[i] / 1e9;
  const dist::BucketChoice slow = dist::choose_bucket_sizes(sizes, times, 200 * kMB);
  CHECK(slow.bucket_cap_mb == doctest::Approx(10 * c.bucket_cap_mb).epsilon(1e-6));
  // Clamped to the gradient size, and the first bucket to the cap.
  const dist::BucketChoice small = dist::choose_bucket_sizes(sizes, times, 0.5 * kMB);
  CHECK(small.bucket_cap_mb == doctest::Approx(0.5));
  CHECK(small.first_bucket_mb <= small.bucket_cap_mb);
  CHECK(small.describe().find("bucket_cap_mb=0.500") != std::string::npos);
  CHECK_THROWS_WITH_AS(dist::choose_bucket_sizes({kMB}, {1e-3}, kMB), doctest::Contains("two"), ls::Error);
}

TEST_CASE("bucket autotune: a superlinear largest size does not swamp the latency estimate") {
  // Measured on this 2-core machine (2 ranks, Gloo, ResNet18's 44.6 MB of
  // gradients): the 44.6 MB AllReduce is 5.7x the 11.1 MB one. Plain least
  // squares puts the intercept at -3 ms; the relative-error fit finds ~120 us.
  const std::vector<double> sizes = {44.6 * kMB, 11.1 * kMB, 2.79 * kMB, 0.697 * kMB, 0.174 * kMB};
  const std::vector<double> times = {109e-3, 19.2e-3, 2.73e-3, 0.735e-3, 0.381e-3};
  const dist::BucketChoice c = dist::choose_bucket_sizes(sizes, times, 44.6 * kMB);
  CHECK(c.latency_us > 50);
  CHECK(c.latency_us < 300);
  CHECK(c.bucket_cap_mb > 0.25);
  CHECK(c.bucket_cap_mb < 4);
  CHECK(c.first_bucket_mb < c.bucket_cap_mb);
}

TEST_CASE("bucket autotune: measured sizes go down from min(gradients, 64 MB) by 4") {
  CHECK(dist::autotune_sizes(static_cast<int64_t>(200 * kMB)) ==
        std::vector<int64_t>{64 << 20, 16 << 20, 4 << 20, 1 << 20, 256 << 10});
  CHECK(dist::autotune_sizes(static_cast<int64_t>(kMB)) ==
        std::vector<int64_t>{1 << 20, 256 << 10, 64 << 10, 16 << 10, 4 << 10});
  CHECK(dist::autotune_sizes(8000) == std::vector<int64_t>{8000, 2000});  // at least two
}

TEST_CASE("ddp autotune: the same choice on every rank, within bounds, and training equals one process") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    ls::testing::run_ranks(world, [world](int rank) {
      auto pg = dist::init_process_group("gloo");
      auto [x, y] = ls::testing::image_data(kSteps * world * kPerRank, 99);
      // Local reference.
      ls::manual_seed(0);
      auto local = std::make_shared<CNN>();
      ls::optim::SGD local_opt(local->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
      for (int step = 0; step < kSteps; ++step) {
        for (int r = 0; r < world; ++r) {
          const int64_t chunk = step * world + r;
          (ls::cross_entropy(local->forward(ls::testing::chunk_rows(x, chunk, kPerRank)),
                             ls::testing::chunk_rows(y, chunk, kPerRank)) / static_cast<double>(world)).backward();
        }
        local_opt.step();
        local_opt.zero_grad();
      }
      ls::manual_seed(0);
      auto model = std::make_shared<CNN>();
      dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().bucket_cap_mb(123).autotune_buckets(true));
      REQUIRE(ddp.bucket_choice().has_value());
      const dist::BucketChoice& c = *ddp.bucket_choice();
      double gradient_bytes = 0;
      for (const auto& p : model->parameters()) gradient_bytes += static_cast<double>(p.nbytes());
      CHECK(c.sizes_bytes.size() >= 2);
      CHECK(c.first_bucket_mb > 0);
      CHECK(c.first_bucket_mb <= c.bucket_cap_mb);
      CHECK(c.bucket_cap_mb * kMB <= std::max(4096.0, gradient_bytes) + 1e-6);
      CHECK(c.latency_us > 0);
      CHECK(c.bandwidth_gbps > 0);
      CHECK(ddp.options().bucket_cap_mb() == c.bucket_cap_mb);  // replaced the 123 MB
      CHECK(ddp.options().first_bucket_mb() == c.first_bucket_mb);
      ls::testing::check_same_on_all_ranks(
          {ls::tensor(std::vector<double>{c.bucket_cap_mb, c.first_bucket_mb, c.latency_us, c.bandwidth_gbps})}, *pg);
      ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
      for (int step = 0; step < kSteps; ++step) {
        const int64_t chunk = step * world + rank;
        ls::cross_entropy(ddp.forward(ls::testing::chunk_rows(x, chunk, kPerRank)),
                          ls::testing::chunk_rows(y, chunk, kPerRank)).backward();
        opt.step();
        opt.zero_grad();
      }
      const auto params = ls::testing::clone_all(model->parameters());
      CHECK(ls::testing::max_abs_diff(params, ls::testing::clone_all(local->parameters())) < 2e-5);
      ls::testing::check_same_on_all_ranks(params, *pg);
    });
  }
}
