// tests/distributed/test_ddp_nonfinite.cpp — Note [Non-finite gradients]: a NaN input on
// one rank is reported by that rank, naming its parameter and the iteration
// (WARN); with SKIP_STEP every rank reports (the others: "another rank produced
// them") and leaves its parameters unchanged for that step; STOP throws on
// every rank; a malformed LOCKSTEP_NONFINITE is an error.
// Read before: distributed/ddp/nonfinite_check.h.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "distributed/ddp/nonfinite_check.h"
#include "distributed/distributed.h"
#include "optim/optim.h"
#include "tests/distributed/ddp_test_models.h"
#include "tests/support/errors.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;
using lockstep::testing::contains;

namespace {

// Three iterations; rank 1's input of iteration 1 holds a NaN. Returns what this
// rank printed on stderr, and the error of the iteration that threw, if any.
struct Run {
  std::string printed, error;
  bool unchanged_at_nan = false;  // the parameters after iteration 1 equal those before it
};
Run train_with_nan(int rank, dist::NonFinitePolicy policy) {
  auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(20s));
  ls::manual_seed(0);
  auto model = std::make_shared<ls::testing::BranchyMLP>();
  dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().non_finite_gradients(policy));
  ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1));
  const std::string log = "/tmp/lockstep_nonfinite_" + std::to_string(getppid()) + "_" + std::to_string(rank);
  REQUIRE(std::freopen(log.c_str(), "w", stderr) != nullptr);
  Run run;
  try {
    for (int i = 0; i < 3; ++i) {
      ls::manual_seed(10 + 2 * i + rank);
      ls::Tensor x = ls::randn({4, 6});
      if (i == 1 && rank == 1) x.data_ptr<float>()[5] = std::numeric_limits<float>::quiet_NaN();
      const ls::Tensor before = model->fc1->weight.detach().clone();
      opt.zero_grad();
      ddp.forward(x, true).sum().backward();
      opt.step();
      if (i == 1) run.unchanged_at_nan = ls::equal(model->fc1->weight, before);
    }
  } catch (const std::exception& e) {
    run.error = e.what();
  }
  std::fflush(stderr);
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(log.c_str());
  run.printed = text.str();
  return run;
}

}  // namespace

TEST_CASE("non-finite gradients: counted exactly in every floating dtype") {
  ls::Tensor t = ls::ones({10});
  t.data_ptr<float>()[2] = std::numeric_limits<float>::infinity();
  t.data_ptr<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  CHECK(dist::detail::count_non_finite(t) == 2);
  CHECK(dist::detail::count_non_finite(t.to(ls::kFloat64)) == 2);
  CHECK(dist::detail::count_non_finite(t.to(ls::kBFloat16)) == 2);
  CHECK(dist::detail::count_non_finite(ls::ones({10})) == 0);
  setenv("LOCKSTEP_NONFINITE", "sometimes", 1);
  std::string bad = lockstep::testing::error_of([] { dist::detail::non_finite_policy(dist::NonFinitePolicy::WARN); });
  CHECK_MESSAGE(contains(bad, "LOCKSTEP_NONFINITE='sometimes' is not one of off, warn, skip, stop"), bad);
  setenv("LOCKSTEP_NONFINITE", "skip", 1);
  CHECK(dist::detail::non_finite_policy(dist::NonFinitePolicy::WARN) == dist::NonFinitePolicy::SKIP_STEP);
  unsetenv("LOCKSTEP_NONFINITE");
}

namespace {

// 1000 floats (the vector loop and its tail) with NaN at 0, +Inf at 17, -Inf at 999
// and `denormal` at 500: the source of the fused copy-in's tests.
ls::Tensor non_finite_source(float denormal) {
  ls::Tensor src = ls::randn({1000});
  float* x = src.data_ptr<float>();
  x[0] = std::numeric_limits<float>::quiet_NaN();
  x[17] = std::numeric_limits<float>::infinity();
  x[999] = -std::numeric_limits<float>::infinity();
  x[500] = denormal;
  return src;
}

}  // namespace

TEST_CASE("non-finite gradients: the fused copy-in equals copy, scale and count one after the other") {
  // Also a value whose product with 1/3 rounds; the reference is the unfused path.
  ls::Tensor src = non_finite_source(std::numeric_limits<float>::denorm_min());
  float* x = src.data_ptr<float>();
  x[501] = 0.1f;
  for (double scale : {1.0, 0.5, 1.0 / 3.0}) {
    for (bool count : {true, false}) {
      ls::Tensor fused = ls::zeros({1000});
      const int64_t bad = dist::detail::copy_scaled_counting_non_finite(fused, src, scale, count);
      ls::Tensor reference = src.clone();
      reference.mul_(scale);
      CHECK(bad == (count ? 3 : 0));
      CHECK(std::memcmp(fused.data_ptr<float>(), reference.data_ptr<float>(), 1000 * sizeof(float)) == 0);
    }
  }
  // Another dtype takes the unfused path, with the same count.
  ls::Tensor d = ls::zeros({1000}, ls::kFloat64);
  CHECK(dist::detail::copy_scaled_counting_non_finite(d, src.to(ls::kFloat64), 0.5, true) == 3);
  CHECK(d.data_ptr<double>()[1] == static_cast<double>(x[1]) * 0.5);
}

TEST_CASE("non-finite gradients: a copy-in of 12 MiB and more (non-temporal stores) equals the plain one bit for bit") {
  // Note [Large bucket copies stream past the cache]: above the size the copy streams its
  // stores; below it, the plain loop. Every alignment of the slot within its bucket, non-finite
  // values in the unaligned head, the 8-lane body and the tail.
  const int64_t n = (int64_t{12} << 20) / 4 + 13;  // 12 MiB + 13 floats
  ls::Tensor src = ls::randn({n});
  float* x = src.data_ptr<float>();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  x[0] = nan;
  x[3] = -inf;
  x[n / 2] = inf;
  x[n / 2 + 1] = std::numeric_limits<float>::denorm_min();
  x[n / 2 + 2] = 0.1f;
  x[n - 1] = nan;
  ls::Tensor bucket = ls::zeros({n + 16});
  for (int64_t offset = 0; offset < 8; ++offset) {
    for (double scale : {1.0, 0.5, 1.0 / 3.0}) {
      for (bool count : {true, false}) {
        CAPTURE(offset);
        CAPTURE(scale);
        ls::Tensor slot = bucket.narrow(0, offset, n);  // (n), as a bucket's slice
        const int64_t bad = dist::detail::copy_scaled_counting_non_finite(slot, src, scale, count);
        ls::Tensor reference = src.clone();
        reference.mul_(scale);
        CHECK(bad == (count ? 4 : 0));
        CHECK(std::memcmp(slot.data_ptr<float>(), reference.data_ptr<float>(), n * sizeof(float)) == 0);
      }
    }
  }
  // In place (Note [Copy-out by reference]: the gradient scaled where it is).
  ls::Tensor in_place = src.clone();
  CHECK(dist::detail::copy_scaled_counting_non_finite(in_place, in_place, 0.5, true) == 4);
  ls::Tensor reference = src.clone();
  reference.mul_(0.5);
  CHECK(std::memcmp(in_place.data_ptr<float>(), reference.data_ptr<float>(), n * sizeof(float)) == 0);
}

TEST_CASE("non-finite gradients: the fused bf16 copy equals convert-then-scale, and counts the same") {
  // Note [Gradient sinks]: a bf16 gradient of a float32 parameter, converted in the pass.
  const ls::Tensor half = non_finite_source(1e-40f).to(ls::kBFloat16);  // 1e-40: a denormal in bf16 too
  for (double scale : {1.0, 0.5, 1.0 / 3.0}) {
    for (bool count : {true, false}) {
      CAPTURE(scale);
      ls::Tensor fused = ls::zeros({1000});
      const int64_t bad = dist::detail::copy_scaled_counting_non_finite(fused, half, scale, count);
      ls::Tensor reference = half.to(ls::kFloat32);
      reference.mul_(scale);
      CHECK(bad == (count ? 3 : 0));
      CHECK(std::memcmp(fused.data_ptr<float>(), reference.data_ptr<float>(), 1000 * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("non-finite gradients: WARN (default): the rank that produced them names its parameter and the iteration") {
  ls::testing::run_ranks(2, [](int rank) {
    Run run = train_with_nan(rank, dist::NonFinitePolicy::WARN);
    CHECK_MESSAGE(run.error.empty(), run.error);
    // Only the rank that produced them warns at #2 (rank 0's own gradients go NaN one step later,
    // once the NaN has reached the parameters).
    const std::string at2 = "DDP (rank " + std::to_string(rank) + "): non-finite gradients in synced backward #2: "
                            "this rank's own gradient of 'fc1.weight' has";
    CHECK_MESSAGE(contains(run.printed, at2) == (rank == 1), run.printed);
    CHECK_MESSAGE(contains(run.printed, "non-finite gradients in synced backward #3"), run.printed);
    CHECK_FALSE(run.unchanged_at_nan);  // WARN lets the step happen
  }, 60s);
}

TEST_CASE("non-finite gradients: SKIP_STEP leaves the parameters unchanged on every rank, STOP throws on every rank") {
  ls::testing::run_ranks(2, [](int rank) {
    Run run = train_with_nan(rank, dist::NonFinitePolicy::SKIP_STEP);
    CHECK_MESSAGE(run.error.empty(), run.error);
    CHECK(run.unchanged_at_nan);
    CHECK_MESSAGE(contains(run.printed, "Gradients cleared on every rank"), run.printed);
    CHECK_MESSAGE(contains(run.printed, rank == 1 ? "this rank's own gradient of 'fc1.weight' has"
                                                  : "this rank's own gradients were finite: another rank produced them"),
                  run.printed);
  }, 60s);
  ls::testing::run_ranks(2, [](int rank) {
    Run run = train_with_nan(rank, dist::NonFinitePolicy::STOP);
    CHECK_MESSAGE(contains(run.error, "non-finite gradients after averaging in synced backward #2"), run.error);
    CHECK_MESSAGE(contains(run.error, "Stopping"), run.error);
  }, 60s);
}
