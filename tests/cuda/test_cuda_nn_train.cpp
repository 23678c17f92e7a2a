// tests/cuda/test_cuda_nn_train.cpp — training on the GPU against the CPU: the
// optimizers' fused device steps (SGD, Adam, AdamW), clip_grad_norm_ on device
// gradients, and ResNet18 and a tiny BERT, forward and backward (dropout masks
// included), on the GPU against the CPU, and a second derivative through
// to(device). Skipped without a GPU (Note [Skipping gpu tests]).
// Read before: tests/cuda/test_cuda_nn.cpp.
#include <doctest/doctest.h>

#include <limits>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "autograd/grad.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "models/bert.h"
#include "models/resnet.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"
#include "tests/cuda/cuda_test_util.h"


namespace {

// Runs `steps` optimizer steps on a CPU parameter and a CUDA copy with the same
// gradients, and checks they stay equal.
template <class MakeOpt>
void check_optimizer_matches(MakeOpt make, ls::ScalarType dtype) {
  Tensor p = random_cpu({37, 5}, dtype);
  Tensor gp = on_cuda(p);
  p.requires_grad_();
  gp.requires_grad_();
  auto cpu_opt = make(std::vector<Tensor>{p});
  auto gpu_opt = make(std::vector<Tensor>{gp});
  for (int t = 0; t < 4; ++t) {
    const Tensor g = random_cpu({37, 5}, dtype);
    p.set_grad(g);
    gp.set_grad(on_cuda(g));
    cpu_opt.step();
    gpu_opt.step();
    check_matches(gp, p, dtype == ls::kFloat64 ? 1e-12 : 1e-5,
                  dtype == ls::kFloat64 ? 1e-12 : 1e-6);
  }
}

}  // namespace

TEST_CASE("CUDA SGD and Adam steps equal the CPU's, step after step") {
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
    CAPTURE(dtype);
    check_optimizer_matches(
        [](std::vector<Tensor> ps) {
          return ls::optim::SGD(ps, ls::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-2));
        },
        dtype);
    check_optimizer_matches(
        [](std::vector<Tensor> ps) {
          return ls::optim::SGD(ps, ls::optim::SGDOptions(0.05).momentum(0.8).nesterov(true));
        },
        dtype);
    check_optimizer_matches(
        [](std::vector<Tensor> ps) {
          return ls::optim::Adam(ps, ls::optim::AdamOptions(1e-2).weight_decay(1e-2).amsgrad(true));
        },
        dtype);
    check_optimizer_matches(
        [](std::vector<Tensor> ps) {
          return ls::optim::AdamW(ps, ls::optim::AdamWOptions(1e-2).weight_decay(0.1));
        },
        dtype);
  }
}

TEST_CASE("CUDA clip_grad_norm_ computes the CPU's norm and scales the device gradients") {
  for (double norm_type : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()}) {
    CAPTURE(norm_type);
    std::vector<Tensor> cpu, gpu;
    for (const IntList& shape : std::vector<IntList>{{300, 7}, {5}, {2, 3, 4}}) {
      Tensor p = random_cpu(shape, ls::kFloat32), gp = on_cuda(p);
      const Tensor g = random_cpu(shape, ls::kFloat32);
      p.set_grad(g);
      gp.set_grad(on_cuda(g));
      cpu.push_back(p);
      gpu.push_back(gp);
    }
    const double want = ls::optim::clip_grad_norm_(cpu, 0.5, norm_type);
    const double got = ls::optim::clip_grad_norm_(gpu, 0.5, norm_type);
    CHECK(got == doctest::Approx(want).epsilon(1e-6));
    for (size_t i = 0; i < cpu.size(); ++i) check_matches(gpu[i].grad(), cpu[i].grad(), 1e-5, 1e-6);
  }
}

namespace {

// After one forward + backward on each, the CUDA model's loss and gradients
// equal the CPU model's (same initial parameters) within rtol/atol.
void check_grads_match(const ls::nn::NamedTensors& gpu, const ls::nn::NamedTensors& cpu,
                       double rtol, double atol) {
  REQUIRE(gpu.size() == cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    CAPTURE(cpu[i].first);
    REQUIRE(cpu[i].second.grad().defined());
    REQUIRE(gpu[i].second.grad().defined());
    check_matches(gpu[i].second.grad(), cpu[i].second.grad(), rtol, atol);
  }
}

}  // namespace

TEST_CASE("CUDA ResNet18 forward and backward match the CPU") {
  ls::manual_seed(7);
  auto cpu = ls::models::resnet18(10);
  ls::manual_seed(7);
  auto gpu = ls::models::resnet18(10);
  gpu->to(cuda0());
  // 64x64 leaves layer4 2x2, so its batch norms see 16 values per channel (2 would make
  // their gradients ill-conditioned, and the CPU/GPU rounding differences with them).
  const Tensor x = random_cpu({4, 3, 64, 64}, ls::kFloat32);
  const Tensor target = ls::tensor(std::vector<int64_t>{3, 8, 0, 5}, {4});
  const Tensor loss = ls::cross_entropy(cpu->forward(x), target);
  const Tensor gloss = ls::cross_entropy(gpu->forward(on_cuda(x)), on_cuda(target));
  check_matches(gloss, loss, 1e-4, 1e-5);
  loss.backward();
  gloss.backward();
  check_grads_match(gpu->named_parameters(), cpu->named_parameters(), 2e-3, 2e-4);
  // The running statistics moved the same way.
  const auto cpu_buffers = cpu->named_buffers(), gpu_buffers = gpu->named_buffers();
  REQUIRE(cpu_buffers.size() == gpu_buffers.size());
  for (size_t i = 0; i < cpu_buffers.size(); ++i) {
    CAPTURE(cpu_buffers[i].first);
    check_matches(gpu_buffers[i].second, cpu_buffers[i].second, 1e-4, 1e-5);
  }
}

TEST_CASE("CUDA tiny BERT forward and backward match the CPU, dropout masks included") {
  ls::manual_seed(11);
  auto cpu = std::make_shared<ls::models::Bert>(ls::models::BertConfig::tiny());
  ls::manual_seed(11);
  auto gpu = std::make_shared<ls::models::Bert>(ls::models::BertConfig::tiny());
  gpu->to(cuda0());
  cpu->train();
  gpu->train();
  const Tensor ids = ls::randint(0, 512, {2, 16});
  const Tensor labels = ls::randint(0, 512, {32});
  ls::manual_seed(99);                      // the same dropout keys for both forwards
  const Tensor logits = cpu->forward(ids);  // (2, 16, 512)
  ls::manual_seed(99);
  const Tensor glogits = gpu->forward(on_cuda(ids));
  check_matches(glogits, logits, 1e-3, 1e-4);
  const Tensor loss = ls::cross_entropy(logits.reshape({32, 512}), labels);
  const Tensor gloss = ls::cross_entropy(glogits.reshape({32, 512}), on_cuda(labels));
  check_matches(gloss, loss, 1e-4, 1e-5);
  loss.backward();
  gloss.backward();
  check_grads_match(gpu->named_parameters(), cpu->named_parameters(), 2e-3, 2e-4);
}

// Note [Double backward]: ToDeviceBackward's formula copies the gradient back with
// the recording to(device), so a gradient taken with create_graph through a
// transfer can be differentiated again. y = sum((x on the GPU)^3): dy/dx = 3 x^2, its
// derivative 6 x, as on the CPU alone.
TEST_CASE("CUDA double backward through to(device) equals the CPU's") {
  ls::manual_seed(12);
  Tensor x = random_cpu({3, 4}, ls::kFloat32).requires_grad_(true);
  auto second = [&x](bool gpu) {
    const Tensor u = gpu ? x.to(cuda0()) : x;
    const Tensor y = (u * u * u).to(ls::Device::cpu()).sum();
    const Tensor g = ls::autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
    CHECK(g.device().is_cpu());
    return std::make_pair(g.detach(), ls::autograd::grad({(g * g).sum()}, {x})[0]);
  };
  const auto [g_gpu, h_gpu] = second(true);
  const auto [g_cpu, h_cpu] = second(false);
  CHECK(ls::allclose(g_gpu, g_cpu, 1e-5, 1e-6));
  CHECK(ls::allclose(h_gpu, h_cpu, 1e-4, 1e-5));
}
