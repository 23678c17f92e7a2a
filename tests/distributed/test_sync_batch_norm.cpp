// tests/distributed/test_sync_batch_norm.cpp — SyncBatchNorm on N ranks is
// BatchNorm2d on the concatenated batch: forward output, input / weight / bias
// gradients and running statistics match one process that sees every rank's
// examples at once, also with a different batch size on each rank; and a
// small ResNet converted with convert_sync_batchnorm and trained under DDP
// ends with the parameters and buffers of single-process training on the full
// batch. Tolerance 1e-5 absolute (values of size ~1; float32 rounding and the
// AllReduce's summation order).
// Read before: distributed/ddp/sync_batch_norm.h, tests/support/multiprocess.h.
#include <doctest/doctest.h>

#include <numeric>

#include "core/autocast.h"
#include "core/grad_mode.h"
#include "distributed/distributed.h"
#include "optim/optim.h"
#include "tests/distributed/ddp_test_models.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;

namespace {

constexpr double kTolerance = 1e-5;
constexpr int64_t kChannels = 3;

double max_diff(const ls::Tensor& a, const ls::Tensor& b) {
  return ls::testing::max_abs_diff({a}, {b});
}

// Sum of `t` over the group (a copy).
ls::Tensor group_sum(const ls::Tensor& t, dist::ProcessGroup& pg) {
  ls::Tensor s = t.detach().clone();
  pg.allreduce(s)->wait(std::chrono::seconds(30));
  return s;
}

// Gives `bn` the weight, bias and running statistics drawn from `seed`.
void init_batch_norm(ls::nn::BatchNorm2d& bn, uint64_t seed) {
  ls::manual_seed(seed);
  ls::NoGradGuard no_grad;
  bn.weight.copy_(ls::randn({kChannels}) * 0.5 + 1.0);
  bn.bias.copy_(ls::randn({kChannels}));
  bn.running_mean.copy_(ls::randn({kChannels}));
  bn.running_var.copy_(ls::randn({kChannels}).abs() + 0.5);
}

// Rank r holds batch[r] examples of (C, 4, 5); two training steps and one eval
// forward, each compared with BatchNorm2d on all examples at once.
void check_against_local(std::vector<int64_t> batch) {
  const int world = static_cast<int>(batch.size());
  ls::testing::run_ranks(
      world,
      [=](int rank) {
        auto pg = dist::init_process_group("gloo");
        const int64_t total = std::accumulate(batch.begin(), batch.end(), int64_t{0});
        const int64_t offset = std::accumulate(batch.begin(), batch.begin() + rank, int64_t{0});
        auto sync = std::make_shared<dist::SyncBatchNorm>(kChannels, pg);
        auto local = std::make_shared<ls::nn::BatchNorm2d>(kChannels);
        init_batch_norm(*sync, 7);
        init_batch_norm(*local, 7);
        // Same parameter and buffer names: state dicts interchange.
        auto sd = sync->state_dict();
        local->load_state_dict(sd);
        for (int step = 0; step < 2; ++step) {
          ls::manual_seed(100 + step);
          ls::Tensor x_all = ls::randn({total, kChannels, 4, 5}) * 2.0 + 3.0;  // mean far from 0
          ls::Tensor g_all = ls::randn({total, kChannels, 4, 5});              // dL/dy
          ls::Tensor x_ref = x_all.clone().requires_grad_(true);
          ls::Tensor y_ref = local->forward(x_ref);
          (y_ref * g_all).sum().backward();

          ls::Tensor x = x_all.narrow(0, offset, batch[rank]).clone().requires_grad_(true);
          ls::Tensor y = sync->forward(x);
          (y * g_all.narrow(0, offset, batch[rank])).sum().backward();

          INFO("rank ", rank, " step ", step);
          CHECK(max_diff(y, y_ref.narrow(0, offset, batch[rank])) < kTolerance);
          CHECK(max_diff(x.grad(), x_ref.grad().narrow(0, offset, batch[rank])) < kTolerance);
          // weight / bias gradients are local sums; their group sum is the full batch's.
          CHECK(max_diff(group_sum(sync->weight.grad(), *pg), local->weight.grad()) < kTolerance);
          CHECK(max_diff(group_sum(sync->bias.grad(), *pg), local->bias.grad()) < kTolerance);
          CHECK(max_diff(sync->running_mean, local->running_mean) < kTolerance);
          CHECK(max_diff(sync->running_var, local->running_var) < kTolerance);
          CHECK(sync->num_batches_tracked.item<int64_t>() == step + 1);
          sync->zero_grad();
          local->zero_grad();
        }
        // Eval: plain BatchNorm2d with the running statistics, no collective.
        sync->eval();
        local->eval();
        ls::Tensor x = ls::randn({batch[rank], kChannels, 4, 5});
        CHECK(max_diff(sync->forward(x), local->forward(x)) < kTolerance);
      },
      std::chrono::seconds(120));
}

// A small ResNet: stem conv-bn-relu, one residual block with a downsampling
// shortcut (conv-bn), pooling, fc. BatchNorms are typed members, as in
// models/resnet.h, which convert_sync_batchnorm must reach.
struct TinyResNet : ls::nn::Module {
  std::shared_ptr<ls::nn::Conv2d> stem, conv1, conv2, down;
  std::shared_ptr<ls::nn::BatchNorm2d> bn0, bn1, bn2, bn_down;
  std::shared_ptr<ls::nn::Linear> fc;
  TinyResNet() {
    using ls::nn::Conv2dOptions;
    stem = register_module(
        "stem", std::make_shared<ls::nn::Conv2d>(Conv2dOptions(3, 4, 3).padding(1).bias(false)));
    bn0 = register_module("bn0", std::make_shared<ls::nn::BatchNorm2d>(4));
    conv1 = register_module("conv1", std::make_shared<ls::nn::Conv2d>(
                                         Conv2dOptions(4, 6, 3).stride(2).padding(1).bias(false)));
    bn1 = register_module("bn1", std::make_shared<ls::nn::BatchNorm2d>(6));
    conv2 = register_module(
        "conv2", std::make_shared<ls::nn::Conv2d>(Conv2dOptions(6, 6, 3).padding(1).bias(false)));
    bn2 = register_module("bn2", std::make_shared<ls::nn::BatchNorm2d>(6));
    down = register_module(
        "down", std::make_shared<ls::nn::Conv2d>(Conv2dOptions(4, 6, 1).stride(2).bias(false)));
    bn_down = register_module("bn_down", std::make_shared<ls::nn::BatchNorm2d>(6));
    fc = register_module("fc", std::make_shared<ls::nn::Linear>(6, 5));
  }
  ls::Tensor forward(const ls::Tensor& x) {
    ls::Tensor h = bn0->forward(stem->forward(x)).relu();     // (B, 4, 8, 8)
    ls::Tensor out = bn1->forward(conv1->forward(h)).relu();  // (B, 6, 4, 4)
    out = bn2->forward(conv2->forward(out));                  // (B, 6, 4, 4)
    out = (out + bn_down->forward(down->forward(h))).relu();  // (B, 6, 4, 4)
    return fc->forward(out.mean({2, 3}));                     // (B, 5)
  }
};

constexpr int kSteps = 3;
constexpr int64_t kPerRank = 4;

// One process, plain BatchNorm2d, the whole batch (world * kPerRank) per step.
std::vector<ls::Tensor> train_full_batch(int world, const ls::Tensor& x, const ls::Tensor& y) {
  ls::manual_seed(0);
  auto model = std::make_shared<TinyResNet>();
  ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
  const int64_t n = world * kPerRank;
  for (int step = 0; step < kSteps; ++step) {
    ls::cross_entropy(model->forward(x.narrow(0, step * n, n)), y.narrow(0, step * n, n))
        .backward();
    opt.step();
    opt.zero_grad();
  }
  auto out = ls::testing::clone_all(model->parameters());
  for (auto& b : ls::testing::clone_all(model->buffers())) out.push_back(b.to(ls::kFloat64));
  return out;
}

void check_ddp_equals_full_batch(int world) {
  ls::testing::run_ranks(
      world,
      [=](int rank) {
        auto [x, y] = ls::testing::image_data(kSteps * world * kPerRank, 321);
        auto pg = dist::init_process_group("gloo");
        ls::manual_seed(rank == 0 ? 0 : 500 + rank);  // DDP's broadcast makes them equal
        auto model = dist::convert_sync_batchnorm(std::make_shared<TinyResNet>(), pg);
        CHECK(model->bn_down->group_statistics != nullptr);
        dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().bucket_cap_mb(0.0005));
        ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
        const int64_t n = world * kPerRank;
        for (int step = 0; step < kSteps; ++step) {
          const int64_t first = step * n + rank * kPerRank;
          ls::cross_entropy(ddp.forward(x.narrow(0, first, kPerRank)), y.narrow(0, first, kPerRank))
              .backward();
          opt.step();
          opt.zero_grad();
        }
        auto got = ls::testing::clone_all(model->parameters());
        for (auto& b : ls::testing::clone_all(model->buffers())) got.push_back(b.to(ls::kFloat64));
        auto expected = train_full_batch(world, x, y);
        REQUIRE(got.size() == expected.size());
        const double diff = ls::testing::max_abs_diff(got, expected);
        INFO("rank ", rank, ": max |ddp with SyncBatchNorm - full batch| = ", diff);
        CHECK(diff < 2e-5);
      },
      std::chrono::seconds(180));
}

}  // namespace

TEST_CASE("sync_batch_norm: 2 ranks equal BatchNorm2d on the concatenated batch") {
  check_against_local({4, 4});
}

TEST_CASE(
    "sync_batch_norm: 2 ranks with unequal batches equal BatchNorm2d on the concatenated batch") {
  check_against_local({2, 5});
}

TEST_CASE(
    "sync_batch_norm: 4 ranks with unequal batches equal BatchNorm2d on the concatenated batch") {
  check_against_local({1, 3, 2, 4});
}

TEST_CASE(
    "sync_batch_norm: convert_sync_batchnorm reaches typed members and keeps the state dict") {
  ls::testing::run_ranks(
      1,
      [](int) {
        auto pg = dist::init_process_group("gloo");
        ls::manual_seed(0);
        auto model = std::make_shared<TinyResNet>();
        const auto before = model->state_dict();
        auto same = dist::convert_sync_batchnorm(model, pg);
        CHECK(same.get() == model.get());
        for (auto bn : {model->bn0, model->bn1, model->bn2, model->bn_down})
          CHECK(bn->group_statistics != nullptr);
        const auto after = model->state_dict();
        REQUIRE(after.size() == before.size());
        for (const auto& [name, t] : before) CHECK(ls::equal(after.at(name), t));
      },
      std::chrono::seconds(60));
}

TEST_CASE("sync_batch_norm: a converted ResNet under DDP on 2 ranks equals full-batch training") {
  check_ddp_equals_full_batch(2);
}

TEST_CASE("sync_batch_norm: a converted ResNet under DDP on 4 ranks equals full-batch training") {
  check_ddp_equals_full_batch(4);
}

TEST_CASE("sync_batch_norm: under autocast a bf16 input computes in float32, with float32 gradients") {
  ls::testing::run_ranks(
      1,
      [](int) {
        auto pg = dist::init_process_group("gloo");
        ls::manual_seed(3);
        ls::Tensor x = ls::randn({4, 3, 5, 5});
        ls::Tensor w = ls::ones({3}), b = ls::zeros({3});
        w.requires_grad_(true);
        b.requires_grad_(true);
        ls::Tensor rm = ls::zeros({3}), rv = ls::ones({3});
        ls::Tensor y, y32;
        {
          ls::AutocastGuard amp(ls::kBFloat16);
          y = dist::sync_batch_norm(x.to(ls::kBFloat16), w, b, rm, rv, 0.1, 1e-5, pg);
        }
        CHECK(y.dtype() == ls::kFloat32);
        ls::Tensor rm32 = ls::zeros({3}), rv32 = ls::ones({3});
        y32 = dist::sync_batch_norm(x.to(ls::kBFloat16).to(ls::kFloat32), w, b, rm32, rv32, 0.1,
                                    1e-5, pg);
        CHECK(ls::equal(y, y32));  // the same float32 op on the same (bf16-rounded) values
        y.sum().backward();
        CHECK(w.grad().dtype() == ls::kFloat32);
        // Outside autocast a bf16 input is still refused with the op's message.
        CHECK_THROWS_WITH_AS(
            dist::sync_batch_norm(x.to(ls::kBFloat16), w, b, rm, rv, 0.1, 1e-5, pg),
            doctest::Contains("expected a float32 or float64 input"), ls::Error);
      },
      std::chrono::seconds(60));
}
