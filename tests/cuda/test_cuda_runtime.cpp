// tests/cuda/test_cuda_runtime.cpp — the CUDA runtime: the caching allocator
// (reuse, stats, empty_cache, record_stream), streams and their guard,
// factories on a device, Tensor::to / Module::to, printing, and autograd on the
// device against the CPU. Skipped without a GPU (Note [Skipping gpu tests]).
// Read before: core/cuda/cuda_allocator.h, tests/cuda/test_cuda_core.cpp.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <sstream>
#include <thread>

#include "core/cuda/cuda_allocator.h"
#include "core/cuda/cuda_context.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "core/rng.h"
#include "nn/linear.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/errors.h"


namespace {
// A fresh leaf that requires grad: a copy of t on `device`.
Tensor native_leaf(const Tensor& t, ls::Device device) {
  Tensor leaf = ls::native::clone(ls::native::to_device(t, device));
  leaf.requires_grad_(true);
  return leaf;
}
}  // namespace

TEST_CASE("CUDA device queries and errors for a device that does not exist") {
  CHECK(ls::cuda::is_available());
  CHECK(ls::cuda::device_count() >= 1);
  const int missing = ls::cuda::device_count();
  const std::string err = ls::testing::error_of([&] { ls::zeros({2}, ls::Device::cuda(missing)); });
  CHECK(ls::testing::contains(err, "does not exist"));
}

TEST_CASE("CUDA caching allocator reuses freed blocks on the same stream and keeps stats") {
  ls::cuda::synchronize(0);
  ls::cuda::empty_cache();
  const auto before = ls::cuda::memory_stats(0);
  CHECK(before.cached_bytes == 0);
  void* first = nullptr;
  {
    Tensor t = ls::native::empty({1000}, ls::kFloat32, ls::Device::cuda(0));  // 4000 B -> 4096 B class
    first = t.raw_data();
    const auto during = ls::cuda::memory_stats(0);
    CHECK(during.allocated_bytes == before.allocated_bytes + ls::cuda::round_size(4000));
    CHECK(during.peak_allocated_bytes >= during.allocated_bytes);
  }
  const auto after_free = ls::cuda::memory_stats(0);
  CHECK(after_free.allocated_bytes == before.allocated_bytes);
  CHECK(after_free.cached_bytes == ls::cuda::round_size(4000));
  {
    Tensor again = ls::native::empty({1020}, ls::kFloat32, ls::Device::cuda(0));  // same class
    CHECK(again.raw_data() == first);
    const auto reused = ls::cuda::memory_stats(0);
    CHECK(reused.num_cuda_mallocs == after_free.num_cuda_mallocs);
    CHECK(reused.num_cache_hits == after_free.num_cache_hits + 1);
  }
  CHECK(ls::cuda::round_size(1) == 512);
  CHECK(ls::cuda::round_size(513) == 1024);
  CHECK(ls::cuda::round_size((size_t{1} << 20) + 1) == (size_t{2} << 20));
  ls::cuda::reset_peak_memory_stats(0);
  CHECK(ls::cuda::memory_stats(0).peak_allocated_bytes == ls::cuda::memory_stats(0).allocated_bytes);
  ls::cuda::empty_cache();
  CHECK(ls::cuda::memory_stats(0).cached_bytes == 0);
}

TEST_CASE("CUDA out-of-memory errors name the request and the device") {
  const std::string err = ls::testing::error_of([] {
    ls::native::empty({int64_t{1} << 50}, ls::kFloat32, ls::Device::cuda(0));  // 4 PiB
  });
  CHECK(ls::testing::contains(err, "out of memory"));
  CHECK(ls::testing::contains(err, "cuda:0"));
}

TEST_CASE("CUDAStreamGuard switches this thread's stream and restores it") {
  const cudaStream_t compute = ls::cuda::current_stream(0);
  cudaStream_t side = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess);
  {
    ls::cuda::CUDAStreamGuard guard(0, side);
    CHECK(ls::cuda::current_stream(0) == side);
    // Kernels queued under the guard run on `side` and give the same results.
    const Tensor x = ls::randn({257});
    check_matches(ls::native::unary(ls::native::UnaryOp::Exp, on_cuda(x)),
                  ls::native::unary(ls::native::UnaryOp::Exp, x), 1e-5, 1e-6);
    std::thread other([&] { CHECK(ls::cuda::current_stream(0) == compute); });  // thread-local
    other.join();
  }
  CHECK(ls::cuda::current_stream(0) == compute);
  REQUIRE(cudaStreamDestroy(side) == cudaSuccess);
}

namespace {
// A host callback that blocks its stream until `release` is set.
void CUDART_CB hold_stream(void* release) {
  auto* flag = static_cast<std::atomic<bool>*>(release);
  while (!flag->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}
}  // namespace

TEST_CASE("record_stream keeps a freed block from reuse until the other stream is done") {
  ls::cuda::synchronize(0);
  ls::cuda::empty_cache();
  cudaStream_t side = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess);
  std::atomic<bool> release{false};
  void* used = nullptr;
  {
    Tensor t = ls::native::empty({4096}, ls::kFloat32, ls::Device::cuda(0));
    used = t.raw_data();
    REQUIRE(cudaLaunchHostFunc(side, hold_stream, &release) == cudaSuccess);  // side is busy
    ls::cuda::record_stream(t, side);
  }  // freed while `side` may still use it
  Tensor blocked = ls::native::empty({4096}, ls::kFloat32, ls::Device::cuda(0));
  CHECK(blocked.raw_data() != used);  // not handed out: side has not finished
  release = true;
  REQUIRE(cudaStreamSynchronize(side) == cudaSuccess);
  Tensor reused = ls::native::empty({4096}, ls::kFloat32, ls::Device::cuda(0));
  CHECK(reused.raw_data() == used);  // side is done: the block is free again
  REQUIRE(cudaStreamDestroy(side) == cudaSuccess);
}

TEST_CASE("CUDA factories make tensors on the device, randn from the CPU generator") {
  const ls::TensorOptions cuda = ls::TensorOptions().device(ls::Device::cuda(0));
  check_matches(ls::zeros({2, 3}, cuda), ls::zeros({2, 3}), 0, 0);
  check_matches(ls::ones({4}, cuda.dtype(ls::kInt64)), ls::ones({4}, ls::TensorOptions().dtype(ls::kInt64)), 0, 0);
  check_matches(ls::full({3}, 2.5, cuda), ls::full({3}, 2.5), 0, 0);
  check_matches(ls::eye(3, cuda), ls::eye(3), 0, 0);
  check_matches(ls::arange(0, 10, 3, cuda.dtype(ls::kInt64)), ls::arange(0, 10, 3), 0, 0);
  ls::manual_seed(7);
  const Tensor on_device = ls::randn({5, 5}, cuda);
  ls::manual_seed(7);
  check_matches(on_device, ls::randn({5, 5}), 0, 0);
  CHECK(ls::zeros({2}, cuda.requires_grad(true)).requires_grad());
  CHECK(ls::zeros_like(on_device).device() == ls::Device::cuda(0));
  CHECK(ls::randn_like(on_device).device() == ls::Device::cuda(0));
}

TEST_CASE("Tensor::to, item and printing work across devices") {
  const Tensor x = ls::randn({3, 4});
  const Tensor g = x.to(ls::Device::cuda(0));
  CHECK(g.device() == ls::Device::cuda(0));
  CHECK(g.to(ls::Device::cuda(0)).is_same(g));  // no-op
  CHECK(ls::native::equal(g.to(ls::Device::cpu()), x));
  CHECK(ls::native::sum(g, {}, false).item<double>() ==
        doctest::Approx(ls::native::sum(x, {}, false).item<double>()).epsilon(1e-6));
  CHECK(g.to_vector<float>() == x.to_vector<float>());
  std::ostringstream os;
  os << g;
  CHECK(ls::testing::contains(os.str(), "device=cuda:0"));
}

TEST_CASE("Module::to moves parameters keeping their identity") {
  ls::nn::Linear layer(4, 3);
  const Tensor weight_before = layer.weight;
  const Tensor values = ls::native::clone(layer.weight);
  layer.to(ls::Device::cuda(0));
  CHECK(layer.weight.is_same(weight_before));  // the same Parameter handle
  CHECK(layer.weight.device() == ls::Device::cuda(0));
  for (const Tensor& p : layer.parameters()) CHECK(p.device() == ls::Device::cuda(0));
  check_matches(layer.weight, values, 0, 0);
  layer.to(ls::Device::cpu());
  CHECK(layer.weight.device().is_cpu());
  CHECK(ls::native::equal(layer.weight, values));
}

TEST_CASE("autograd backward on the device equals the CPU") {
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
    CAPTURE(dtype);
    const Tensor x0 = ls::native::to_dtype(ls::randn({4, 5}), dtype);
    const Tensor w0 = ls::native::to_dtype(ls::randn({5}), dtype);
    const Tensor b0 = ls::native::to_dtype(ls::randn({4, 1}), dtype);
    auto run = [&](ls::Device device) {
      Tensor x = native_leaf(x0, device);
      Tensor w = native_leaf(w0, device);
      Tensor b = native_leaf(b0, device);
      Tensor h = (x * w + b).relu();
      Tensor y = (h.softmax(1) * x.sigmoid()).log_softmax(0).sum() + h.mean() * 0.5 -
                 (x / (w.abs() + 1.0)).pow(2.0).max();
      y.backward();
      return std::tuple{y, x.grad(), w.grad(), b.grad()};
    };
    auto [y_cpu, gx_cpu, gw_cpu, gb_cpu] = run(ls::Device::cpu());
    auto [y_gpu, gx_gpu, gw_gpu, gb_gpu] = run(ls::Device::cuda(0));
    check_matches(y_gpu, y_cpu, 1e-5, 1e-5);
    check_matches(gx_gpu, gx_cpu, 1e-4, 1e-5);
    check_matches(gw_gpu, gw_cpu, 1e-4, 1e-5);
    check_matches(gb_gpu, gb_cpu, 1e-4, 1e-5);
  }
  // The gradient of .to(cuda) flows back to the CPU leaf.
  Tensor leaf = ls::randn({3}).requires_grad_();
  (leaf.to(ls::Device::cuda(0)) * 2.0).sum().backward();
  CHECK(leaf.grad().device().is_cpu());
  CHECK(ls::native::allclose(leaf.grad(), ls::full({3}, 2.0), 0, 0));
}
