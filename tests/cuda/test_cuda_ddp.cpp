// tests/cuda/test_cuda_ddp.cpp — the distributed part of the CUDA backend:
// ProcessGroupNCCL at world size 1 (device and CPU tensors), the stream-isolation
// property, the watchdog's timeout, DDP over NCCL equal to single-process
// training, and 2 ranks over Gloo with CUDA tensors (threads of this process,
// both on cuda:0) equal to single-process training. Skipped without a GPU
// (Note [Skipping gpu tests]).
//
// Why threads, not run_ranks' processes: this binary initialises CUDA before
// any test (to decide whether to skip), and a forked child cannot use a CUDA
// context its parent created. Two Gloo ranks in one process work (their pairs
// talk over loopback) and share the device's compute stream.
// Why no 2-rank NCCL test: NCCL does not support two ranks of one communicator
// on the same GPU, and the GPU machine has one; 2-rank NCCL runs are
// bench_ddp --backend nccl under lockstep-run on a multi-GPU host.
// Read before: distributed/process_group/cuda/process_group_nccl.h,
// distributed/process_group/cuda/host_staging.h.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/cuda_context.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "core/rng.h"
#include "distributed/process_group/cuda/process_group_nccl.h"
#include "distributed/process_group/cuda/process_group_nccl_work.h"
#include "distributed/distributed.h"
#include "optim/sgd.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/distributed/collective_test_util.h"
#include "tests/distributed/ddp_test_models.h"
#include "tests/support/errors.h"

namespace dist = lockstep::distributed;

namespace {

constexpr int kSteps = 3;
constexpr int64_t kPerRank = 4;

std::shared_ptr<dist::ProcessGroupNCCL> nccl_world1(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  dist::ProcessGroupNCCL::Options o;
  o.device = 0;
  o.timeout = timeout;
  return std::make_shared<dist::ProcessGroupNCCL>(std::make_shared<dist::HashStore>(), 0, 1, o);
}

Tensor to_cpu(const Tensor& t) { return ls::native::to_device(t, ls::Device::cpu()); }

// Runs body(rank) for ranks 0 and 1 on two threads of this process (see the file
// comment for why threads) and requires both to finish without an exception.
void run_two_threads(const std::function<void(int)>& body) {
  std::vector<std::string> failures(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        body(rank);
      } catch (const std::exception& e) {
        failures[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank ", rank, ": ", failures[rank]);
    REQUIRE(failures[rank].empty());
  }
}

// Holds a stream at a host function until opened (or 20 s pass, so a broken
// test cannot hang forever): kernels queued behind it wait, the host does not.
struct StreamGate {
  std::atomic<bool> open{false};
  std::atomic<bool> gave_up{false};
  static void CUDART_CB hold(void* self) {
    auto* gate = static_cast<StreamGate*>(self);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!gate->open.load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        gate->gave_up = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  void close(cudaStream_t stream) { LS_CUDA_CHECK(cudaLaunchHostFunc(stream, &StreamGate::hold, this)); }
  ~StreamGate() { open = true; }
};

ls::Tensor rows(const ls::Tensor& t, int64_t chunk) { return t.narrow(0, chunk * kPerRank, kPerRank); }

// Single-process reference on cuda:0: each step averages `world` chunks' gradients.
std::vector<Tensor> train_locally_on_cuda(int world, const Tensor& x, const Tensor& y) {
  ls::manual_seed(0);
  auto model = std::make_shared<ls::testing::TinyCNN>();
  model->to(ls::Device::cuda(0));
  ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < world; ++r) {
      const int64_t chunk = step * world + r;
      (ls::cross_entropy(model->forward(rows(x, chunk)), rows(y, chunk)) / static_cast<double>(world)).backward();
    }
    opt.step();
    opt.zero_grad();
  }
  std::vector<Tensor> out;
  for (const Tensor& p : model->parameters()) out.push_back(to_cpu(p.detach()));
  return out;
}

std::vector<Tensor> cpu_parameters(ls::nn::Module& m) {
  std::vector<Tensor> out;
  for (const Tensor& p : m.parameters()) out.push_back(to_cpu(p.detach()));
  return out;
}

}  // namespace

TEST_CASE("nccl world 1: allreduce, broadcast, allgather, reduce_scatter of device tensors") {
  ls::manual_seed(3);
  auto pg = nccl_world1();
  CHECK(pg->backend_name() == "nccl");
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64, ls::kFloat16, ls::kBFloat16, ls::kInt64}) {
    const Tensor host = ls::testing::random_cpu({37, 5}, dtype);
    for (dist::ReduceOp op : {dist::ReduceOp::SUM, dist::ReduceOp::MAX, dist::ReduceOp::MIN, dist::ReduceOp::PRODUCT}) {
      Tensor t = on_cuda(host);
      pg->allreduce(t, op)->wait();
      ls::testing::check_matches(t, host, 0, 0);  // one rank: op over {x} is x
    }
  }
  Tensor b = on_cuda(ls::testing::random_cpu({100}, ls::kFloat32));
  const Tensor b_host = to_cpu(b);
  pg->broadcast(b, 0)->wait();
  ls::testing::check_matches(b, b_host, 0, 0);

  const Tensor in_host = ls::testing::random_cpu({6, 7}, ls::kFloat32);
  std::vector<Tensor> gathered;  // made by the group, on the input's device
  pg->allgather(gathered, on_cuda(in_host))->wait();
  REQUIRE(gathered.size() == 1);
  ls::testing::check_matches(gathered[0], in_host, 0, 0);

  Tensor out = on_cuda(ls::zeros({6, 7}));
  std::vector<Tensor> inputs{on_cuda(in_host)};
  pg->reduce_scatter(out, inputs, dist::ReduceOp::SUM)->wait();
  ls::testing::check_matches(out, in_host, 0, 0);
  pg->barrier()->wait();
}

TEST_CASE("nccl world 1: CPU tensors are staged and their wait blocks until the host holds the result") {
  auto pg = nccl_world1();
  Tensor flags = ls::tensor(std::vector<int64_t>{3, 0, 7, 1});
  auto work = pg->allreduce(flags, dist::ReduceOp::SUM);
  work->wait();
  CHECK(work->is_completed());
  CHECK(flags.to_vector<int64_t>() == std::vector<int64_t>{3, 0, 7, 1});
  Tensor avg = ls::tensor(std::vector<float>{2, 4});
  pg->allreduce(avg, dist::ReduceOp::AVG)->wait();
  CHECK(avg.to_vector<float>() == std::vector<float>{2, 4});
  const std::string err = ls::testing::error_of([&] {
    Tensor bad = ls::tensor(std::vector<int64_t>{1});
    pg->allreduce(bad, dist::ReduceOp::AVG);
  });
  CHECK(ls::testing::contains(err, "AVG needs a floating-point tensor"));
}

TEST_CASE("nccl stream isolation: the comm stream waits on the compute stream's event, the host does not") {
  auto pg = nccl_world1();
  Tensor warm = on_cuda(ls::ones({4}));
  pg->allreduce(warm)->wait();  // collective #0 exchanges fingerprints, which blocks the host once
  ls::cuda::synchronize(0);

  Tensor input = on_cuda(ls::zeros({4096}));  // (4096)
  std::vector<Tensor> outputs{on_cuda(ls::zeros({4096}))};
  ls::cuda::synchronize(0);
  StreamGate gate;
  gate.close(ls::cuda::current_stream(0));
  ls::native::fill_(input, 7.0);                 // queued behind the gate
  auto work = pg->allgather(outputs, input);     // must return while the gate is closed
  const bool returned_while_closed = !gate.gave_up.load();
  auto nccl_work = std::dynamic_pointer_cast<ls::distributed::detail::WorkNCCL>(work);
  REQUIRE(nccl_work != nullptr);
  // The collective cannot have run: its stream waits for the fill behind the gate.
  const cudaError_t before_open = cudaEventQuery(nccl_work->end_event());
  CHECK_FALSE(work->is_completed());
  gate.open = true;
  work->wait();  // the compute stream waits for the comm stream
  ls::cuda::synchronize(0);
  CHECK(returned_while_closed);
  CHECK(before_open == cudaErrorNotReady);
  // The allgather saw the fill that was queued before it on the compute stream.
  ls::testing::check_matches(outputs[0], ls::full({4096}, 7.0), 0, 0);
}

TEST_CASE("nccl watchdog: a collective past the timeout aborts the communicator and names the collective") {
  auto pg = nccl_world1(std::chrono::milliseconds(300));
  Tensor warm = on_cuda(ls::ones({4}));
  pg->allreduce(warm)->wait();
  ls::cuda::synchronize(0);
  Tensor t = on_cuda(ls::ones({1000}));
  StreamGate gate;
  gate.close(ls::cuda::current_stream(0));
  auto work = std::dynamic_pointer_cast<ls::distributed::detail::WorkNCCL>(pg->allreduce(t));
  REQUIRE(work != nullptr);
  const std::string err = ls::testing::error_of([&] { work->synchronize(std::chrono::seconds(10)); });
  const std::string broken = pg->broken();
  const std::string later = ls::testing::error_of([&] { pg->allreduce(t); });
  gate.open = true;
  INFO(err);
  CHECK(ls::testing::contains(err, "allreduce #1 of 1000 float32"));
  CHECK(ls::testing::contains(err, "did not complete within 300 ms"));
  CHECK(ls::testing::contains(err, "aborted"));
  CHECK_FALSE(broken.empty());
  CHECK(ls::testing::contains(later, "unusable after an earlier failure"));
  // No more CUDA work here: the aborted communicator's kernel may still be
  // queued behind the gate (each doctest case runs in its own process).
}

TEST_CASE("nccl: DDP with world size 1 equals single-process training on the GPU") {
  auto [x_cpu, y_cpu] = ls::testing::image_data(kSteps * kPerRank, 123);
  const Tensor x = on_cuda(x_cpu), y = on_cuda(y_cpu);
  const std::vector<Tensor> expected = train_locally_on_cuda(1, x, y);
  for (bool as_view : {false, true}) {
    auto pg = nccl_world1();
    ls::manual_seed(0);
    auto model = std::make_shared<ls::testing::TinyCNN>();
    model->to(ls::Device::cuda(0));
    dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().gradient_as_bucket_view(as_view));
    CHECK(ddp.reducer().buckets()[0].flat.device() == ls::Device::cuda(0));
    ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < kSteps; ++step) {
      ls::cross_entropy(ddp.forward(rows(x, step)), rows(y, step)).backward();
      opt.step();
      opt.zero_grad();
    }
    const double diff = ls::testing::max_abs_diff(cpu_parameters(*model), expected);
    INFO("gradient_as_bucket_view ", as_view, ": max |ddp - local| = ", diff);
    CHECK(diff < 1e-5);
  }
}

TEST_CASE("gloo with CUDA tensors: 2 ranks (threads on cuda:0) reduce exactly") {
  auto store = std::make_shared<dist::HashStore>();
  std::vector<std::vector<Tensor>> results(2);  // per rank: allreduce, broadcast, gathered[0], gathered[1]
  run_two_threads([&](int rank) {
    dist::ProcessGroupGloo::Options o;
    o.timeout = std::chrono::seconds(30);
    dist::ProcessGroupGloo pg(store, rank, 2, o);
    // Above chunk_bytes: the allreduce runs in pieces, each copied back on its own.
    Tensor big = on_cuda(ls::testing::rank_input(rank, (5 << 20) / 4 + 3, ls::kFloat32));
    pg.allreduce(big, dist::ReduceOp::SUM)->wait();
    Tensor b = on_cuda(ls::testing::rank_input(rank, 33, ls::kFloat64));
    pg.broadcast(b, 1)->wait();
    std::vector<Tensor> gathered;
    pg.allgather(gathered, on_cuda(ls::testing::rank_input(rank, 10, ls::kInt64)))->wait();
    results[rank] = {to_cpu(big), to_cpu(b), to_cpu(gathered.at(0)), to_cpu(gathered.at(1)),
                     gathered.at(0).device().is_cuda() ? ls::ones({1}) : ls::zeros({1})};
  });
  for (int rank = 0; rank < 2; ++rank) {
    ls::testing::check_reduced(results[rank][0], dist::ReduceOp::SUM, 2, "allreduce");
    CHECK(ls::equal(results[rank][1], ls::testing::rank_input(1, 33, ls::kFloat64)));
    CHECK(ls::equal(results[rank][2], ls::testing::rank_input(0, 10, ls::kInt64)));
    CHECK(ls::equal(results[rank][3], ls::testing::rank_input(1, 10, ls::kInt64)));
    CHECK(results[rank][4].item<float>() == 1.0f);  // outputs were made on the device
  }
}

TEST_CASE("gloo with CUDA tensors: 2-rank DDP (threads on cuda:0) equals single-process training") {
  auto [x_cpu, y_cpu] = ls::testing::image_data(kSteps * 2 * kPerRank, 123);
  const Tensor x = on_cuda(x_cpu), y = on_cuda(y_cpu);
  const std::vector<Tensor> expected = train_locally_on_cuda(2, x, y);
  // Models built here (the RNG is global): rank 0 from the reference's seed, rank
  // 1 from another — DDP's construction-time broadcast must make them equal.
  std::vector<std::shared_ptr<ls::testing::TinyCNN>> models;
  for (int rank = 0; rank < 2; ++rank) {
    ls::manual_seed(rank == 0 ? 0 : 1001);
    models.push_back(std::make_shared<ls::testing::TinyCNN>());
    models.back()->to(ls::Device::cuda(0));
  }
  auto store = std::make_shared<dist::HashStore>();
  std::vector<std::vector<Tensor>> params(2);
  run_two_threads([&](int rank) {
    dist::ProcessGroupGloo::Options o;
    o.timeout = std::chrono::seconds(60);
    auto pg = std::make_shared<dist::ProcessGroupGloo>(store, rank, 2, o);
    auto model = models[rank];
    dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().bucket_cap_mb(0.001));
    ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < kSteps; ++step) {
      const int64_t chunk = step * 2 + rank;
      ls::cross_entropy(ddp.forward(rows(x, chunk)), rows(y, chunk)).backward();
      opt.step();
      opt.zero_grad();
    }
    ls::cuda::synchronize(0);
    params[rank] = cpu_parameters(*model);
  });
  for (int rank = 0; rank < 2; ++rank) {
    const double diff = ls::testing::max_abs_diff(params[rank], expected);
    INFO("max |ddp - local| = ", diff);
    CHECK(diff < 1e-4);
  }
  for (size_t i = 0; i < params[0].size(); ++i) CHECK(ls::equal(params[0][i], params[1][i]));
}

TEST_CASE("nccl: fp16 and full-rank PowerSGD comm hooks reduce device buckets (world size 1)") {
  auto [x_cpu, y_cpu] = ls::testing::image_data(kPerRank, 7);
  const Tensor x = on_cuda(x_cpu), y = on_cuda(y_cpu);
  auto grads_of = [&](const std::function<void(dist::DistributedDataParallel<ls::testing::TinyCNN>&,
                                               const std::shared_ptr<dist::ProcessGroup>&)>& setup) {
    auto pg = nccl_world1();
    ls::manual_seed(0);
    auto model = std::make_shared<ls::testing::TinyCNN>();
    model->to(ls::Device::cuda(0));
    dist::DistributedDataParallel<ls::testing::TinyCNN> ddp(model, pg, dist::DDPOptions());
    if (setup) setup(ddp, pg);
    ls::cross_entropy(ddp.forward(x), y).backward();
    std::vector<Tensor> out;
    for (const Tensor& p : model->parameters()) out.push_back(to_cpu(p.grad()));
    return out;
  };
  const std::vector<Tensor> plain = grads_of(nullptr);
  const std::vector<Tensor> fp16 = grads_of([](auto& ddp, const auto& pg) {
    ddp.register_comm_hook(pg, dist::comm_hooks::fp16_compress_hook);
  });
  // Rank >= every gradient matrix's smaller side: P Q^T reproduces M (up to rounding).
  const std::vector<Tensor> powersgd = grads_of([](auto& ddp, const auto& pg) {
    auto state = std::make_shared<dist::comm_hooks::PowerSGDState>(
        pg, dist::comm_hooks::PowerSGDOptions().matrix_approximation_rank(64).start_powersgd_iter(0)
                .min_compression_rate(0.0).use_error_feedback(false));
    ddp.register_comm_hook(state, dist::comm_hooks::powersgd_hook);
  });
  const double fp16_diff = ls::testing::max_abs_diff(fp16, plain);
  const double powersgd_diff = ls::testing::max_abs_diff(powersgd, plain);
  INFO("fp16 hook: max diff ", fp16_diff, "; PowerSGD full rank: max diff ", powersgd_diff);
  CHECK(fp16_diff < 2e-3);
  CHECK(powersgd_diff < 1e-4);
  double largest = 0;
  for (const Tensor& g : plain) largest = std::max(largest, ls::native::to_dtype(g.abs().max(), ls::kFloat64).item<double>());
  CHECK(largest > 1e-3);  // the comparison is not between zeros
}
