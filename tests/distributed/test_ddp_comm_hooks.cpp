// tests/distributed/test_ddp_comm_hooks.cpp — communication hooks (Note
// [Communication hooks], distributed/ddp/comm_hook.h): the allreduce hook is bitwise
// DDP's own reduction, also with gradient_as_bucket_view and for a user lambda
// with its own state; fp16/bf16 compression gives gradients representable in
// the wire precision and within its rounding of the exact average; PowerSGD
// (Note [PowerSGD]) at full rank equals the exact average closely, at rank 1
// keeps an error-feedback memory per bucket that carries the compression error
// into the next iteration, and still trains a small model; misuse errors.
// MPI runs of the hooks: tests/distributed/test_ddp_beyond_mpi.cpp.
// Read before: distributed/comm_hooks/default_hooks.h, distributed/comm_hooks/powersgd.h.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>

#include "core/native/native.h"
#include "tests/distributed/ddp_beyond_util.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
namespace hooks = lockstep::distributed::comm_hooks;
using namespace std::chrono_literals;
using CNN = ls::testing::TinyCNN;
using Setup = std::function<void(dist::DistributedDataParallel<CNN>&)>;

namespace {

constexpr int64_t kPerRank = 4;

// TinyCNN, 3 SGD-momentum steps through DDP with `setup` applied (the hook);
// returns the parameters.
std::vector<ls::Tensor> train(std::shared_ptr<dist::ProcessGroup> pg, const Setup& setup,
                              dist::DDPOptions options = dist::DDPOptions().bucket_cap_mb(0.002)) {
  const int world = pg->size(), rank = pg->rank();
  auto [x, y] = ls::testing::image_data(3 * world * kPerRank, 123);
  ls::manual_seed(0);
  auto model = std::make_shared<CNN>();
  dist::DistributedDataParallel ddp(model, pg, options);
  if (setup) setup(ddp);
  ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 3; ++step) {
    const int64_t chunk = step * world + rank;
    ls::cross_entropy(ddp.forward(ls::testing::chunk_rows(x, chunk, kPerRank)),
                      ls::testing::chunk_rows(y, chunk, kPerRank)).backward();
    opt.step();
    opt.zero_grad();
  }
  return ls::testing::clone_all(model->parameters());
}

// The gradients of one backward on batch `seed` (same start on every call).
std::vector<ls::Tensor> one_backward(std::shared_ptr<dist::ProcessGroup> pg, const Setup& setup, uint64_t seed) {
  ls::manual_seed(0);
  auto model = std::make_shared<CNN>();
  dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().bucket_cap_mb(0.002));
  if (setup) setup(ddp);
  ls::manual_seed(seed + pg->rank());
  ls::cross_entropy(ddp.forward(ls::randn({kPerRank, 3, 8, 8})), ls::randint(0, 5, {kPerRank})).backward();
  return ls::testing::grads_of(model->parameters());
}

double max_abs(const ls::Tensor& t) { return ls::native::max_all(ls::native::unary(ls::native::UnaryOp::Abs, t)).item<double>(); }

// A user hook with its own state: counts its calls, then does what allreduce_hook does.
struct CountingState {
  std::shared_ptr<dist::ProcessGroup> pg;
  int calls = 0;
  int last_buckets = 0;
};

}  // namespace

TEST_CASE("ddp comm hook: the allreduce hook and a user lambda are bitwise DDP's own reduction") {
  ls::testing::run_ranks(2, [](int) {
    auto pg = dist::init_process_group("gloo");
    const auto plain = train(pg, nullptr);
    CHECK(ls::testing::all_equal(plain, train(pg, [&](auto& ddp) { ddp.register_comm_hook(pg, hooks::allreduce_hook); })));
    CHECK(ls::testing::all_equal(plain, train(pg, [&](auto& ddp) { ddp.register_comm_hook(pg, hooks::allreduce_hook); },
                                              dist::DDPOptions().bucket_cap_mb(0.002).gradient_as_bucket_view(true))));
    auto state = std::make_shared<CountingState>(CountingState{pg});
    size_t buckets = 0;
    const auto counted = train(pg, [&](auto& ddp) {
      buckets = ddp.reducer().num_buckets();
      ddp.register_comm_hook(state, [](CountingState& s, dist::GradBucket& b) {
        ++s.calls;
        if (b.is_last()) s.last_buckets = static_cast<int>(b.index()) + 1;
        return hooks::allreduce_hook(*s.pg, b);
      });
    });
    CHECK(ls::testing::all_equal(plain, counted));
    REQUIRE(buckets > 1);
    CHECK(state->calls == 3 * static_cast<int>(buckets));
    CHECK(state->last_buckets == static_cast<int>(buckets));
  }, 60s);
}

TEST_CASE("ddp comm hook: fp16 and bf16 compression match the average within their precision") {
  ls::testing::run_ranks(2, [](int) {
    auto pg = dist::init_process_group("gloo");
    const auto exact = one_backward(pg, nullptr, 50);
    struct Case { const char* name; dist::TensorFuture (*hook)(dist::ProcessGroup&, dist::GradBucket&);
                  ls::ScalarType wire; double rtol; };
    for (const Case& c : {Case{"fp16", hooks::fp16_compress_hook, ls::kFloat16, 2e-3},
                          Case{"bf16", hooks::bf16_compress_hook, ls::kBFloat16, 1.6e-2}}) {
      CAPTURE(c.name);
      const auto got = one_backward(pg, [&](auto& ddp) { ddp.register_comm_hook(pg, c.hook); }, 50);
      double worst_relative = 0;
      for (size_t i = 0; i < exact.size(); ++i) {
        // The sum went over the wire in the low precision: every value is representable in it.
        CHECK(ls::equal(got[i], ls::native::to_dtype(ls::native::to_dtype(got[i], c.wire), ls::kFloat32)));
        const double err = max_abs(ls::native::binary(ls::native::BinaryOp::Sub, got[i], exact[i]));
        const double scale = max_abs(exact[i]);
        CHECK_MESSAGE(err <= c.rtol * scale + 1e-9, "parameter " << i << ": max error " << err << " vs max |g| " << scale);
        worst_relative = std::max(worst_relative, err / std::max(scale, 1e-30));
      }
      CHECK(worst_relative > 0);  // it did round: the hook ran
    }
  }, 60s);
}

TEST_CASE("ddp comm hook: PowerSGD at full rank equals the exact average closely") {
  ls::testing::run_ranks(2, [](int) {
    auto pg = dist::init_process_group("gloo");
    const auto plain = train(pg, nullptr);
    // Rank 64 >= min(n, m) of every weight: P spans the average's columns exactly.
    auto state = std::make_shared<hooks::PowerSGDState>(
        pg, hooks::PowerSGDOptions().matrix_approximation_rank(64).start_powersgd_iter(0).min_compression_rate(0));
    const auto powersgd = train(pg, [&](auto& ddp) { ddp.register_comm_hook(state, hooks::powersgd_hook); });
    CHECK(state->compressed_buckets() > 0);
    CHECK(state->iteration() == 3);
    const double diff = ls::testing::max_abs_diff(plain, powersgd);
    CHECK_MESSAGE(diff < 1e-6, "max |powersgd - allreduce| = " << diff);
    ls::testing::check_same_on_all_ranks(powersgd, *pg);
  }, 60s);
}

TEST_CASE("ddp comm hook: PowerSGD rank 1 keeps a per-bucket error feedback that it feeds back") {
  ls::testing::run_ranks(2, [](int) {
    auto pg = dist::init_process_group("gloo");
    const double world = pg->size();
    // One bucket per parameter, kept (no rebuild) so bucket b's memory stays bucket b's.
    const auto options = dist::DDPOptions().bucket_cap_mb(0).rebuild_buckets(false);
    auto state = std::make_shared<hooks::PowerSGDState>(
        pg, hooks::PowerSGDOptions().matrix_approximation_rank(1).start_powersgd_iter(0));
    ls::manual_seed(0);
    auto model = std::make_shared<CNN>();
    ls::manual_seed(0);
    auto reference = std::make_shared<CNN>();
    dist::DistributedDataParallel ddp(model, pg, options);
    dist::DistributedDataParallel exact(reference, pg, options);  // same parameters (broadcast from rank 0)
    ddp.register_comm_hook(state, hooks::powersgd_hook);
    // sum over ranks of what each rank put in the buckets last time, per parameter
    std::vector<ls::Tensor> previous_error_sum(model->parameters().size());
    for (int k = 0; k < 2; ++k) {
      CAPTURE(k);
      ls::manual_seed(60 + 2 * k + pg->rank());
      ls::Tensor x = ls::randn({kPerRank, 3, 8, 8}), y = ls::randint(0, 5, {kPerRank});
      ls::cross_entropy(ddp.forward(x), y).backward();
      ls::cross_entropy(exact.forward(x), y).backward();
      REQUIRE(state->iteration() == k + 1);
      const auto& buckets = ddp.reducer().buckets();
      bool lossy = false;
      for (size_t b = 0; b < buckets.size(); ++b) {
        const size_t i = buckets[b].param_indices.at(0);
        ls::Tensor error = state->error(b);
        REQUIRE(error.defined());
        REQUIRE(error.numel() == model->parameters()[i].numel());
        // sum_r error_r = sum_r (g_r + previous error_r) - world * result
        //              = world * (exact average - result) + sum_r previous error_r
        ls::Tensor error_sum = error.clone();
        pg->allreduce(error_sum)->wait();
        ls::Tensor expected = (reference->parameters()[i].grad() - model->parameters()[i].grad()).reshape({-1}) * world;
        if (previous_error_sum[i].defined()) expected = expected + previous_error_sum[i];
        CHECK(ls::allclose(error_sum, expected, 1e-4, 1e-5));
        previous_error_sum[i] = error_sum;
        if (max_abs(error_sum) > 1e-3) lossy = true;
      }
      CHECK(lossy);  // rank 1 cannot carry every weight exactly
      model->zero_grad();
      reference->zero_grad();
    }
  }, 60s);
}

TEST_CASE("ddp comm hook: PowerSGD rank 1 still trains a small model") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    auto [x, y] = ls::testing::image_data(2 * 16, 5);
    ls::manual_seed(0);
    auto model = std::make_shared<CNN>();
    dist::DistributedDataParallel ddp(model, pg);
    auto state = std::make_shared<hooks::PowerSGDState>(
        pg, hooks::PowerSGDOptions().matrix_approximation_rank(1).start_powersgd_iter(2));
    ddp.register_comm_hook(state, hooks::powersgd_hook);
    ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.05).momentum(0.9));
    std::vector<double> losses;
    for (int step = 0; step < 30; ++step) {
      ls::Tensor loss = ls::cross_entropy(ddp.forward(ls::testing::chunk_rows(x, rank, 16)),
                                          ls::testing::chunk_rows(y, rank, 16));
      losses.push_back(loss.item<double>());
      loss.backward();
      opt.step();
      opt.zero_grad();
    }
    CHECK(state->compressed_buckets() > 0);
    const double last = (losses[27] + losses[28] + losses[29]) / 3;
    CHECK_MESSAGE(last < 0.25 * losses[0], "loss " << losses[0] << " -> " << last);
    ls::testing::check_same_on_all_ranks(model->parameters(), *pg);
  }, 60s);
}

TEST_CASE("ddp comm hook: registering twice or after a backward is an error naming the rule") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    ls::manual_seed(0);
    auto model = std::make_shared<CNN>();
    dist::DistributedDataParallel ddp(model, pg);
    ddp.register_comm_hook(pg, hooks::allreduce_hook);
    try {
      ddp.register_comm_hook(pg, hooks::fp16_compress_hook);
      FAIL("a second register_comm_hook should throw");
    } catch (const ls::Error& e) {
      CHECK(std::string(e.what()).find("only once") != std::string::npos);
    }
    dist::DistributedDataParallel late(std::make_shared<CNN>(), pg);
    ls::manual_seed(rank);
    late.forward(ls::randn({2, 3, 8, 8})).sum().backward();
    try {
      late.register_comm_hook(pg, hooks::allreduce_hook);
      FAIL("register_comm_hook after a backward should throw");
    } catch (const ls::Error& e) {
      CHECK(std::string(e.what()).find("before the first synced forward") != std::string::npos);
    }
  }, 60s);
}
