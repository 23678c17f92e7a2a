// bench/bench_nosync_convergence.cpp — training loss against iterations when DDP
// synchronizes only every S iterations (no_sync, gradient accumulation): the paper's
// Figure 11, on real data (Fashion-MNIST) with the small CNN.
//
//   build/bin/lockstep-run --nproc-per-node 2 -- build/bin/bench_nosync_convergence
//       --batch 32 --iters 400 --sync-every 1,2,4,8 [--lr 0.05] [--momentum 0.9] [--seed 0]
//       [--threads 1] [--root /usr/share/datasets/fashion-mnist]
//       [--comm-hook none|allreduce|fp16|bf16|powersgd] [--powersgd-rank R]
//       [--start-powersgd-iter K]
//   (no launcher: one process, world 1)
//
// --sync-every takes a list: each S trains a fresh model (same seed) in turn, in the same
// processes, so data loading and the rendezvous are paid once.
// One iteration = one forward and backward of a --batch batch on every rank (a
// DistributedSampler shard, reshuffled every epoch). S-1 of every S iterations run under
// ddp.no_sync(): gradients only accumulate locally. The S-th synchronizes — its AllReduce
// carries the sum of the S local gradients, averaged over ranks — and then SGD takes one
// step and the gradients are zeroed. Each backward uses loss / S, so a step applies the
// mean gradient over S x world x batch examples: S trades communication for a larger
// effective batch and S times fewer optimizer steps (paper Section 3.2.4).
// --comm-hook registers a DDP communication hook (Note [Communication hooks],
// distributed/ddp/comm_hook.h) on every fresh model: allreduce (bitwise DDP's own reduction),
// fp16 / bf16 (gradients rounded to 16 bits on the wire) or powersgd (rank --powersgd-rank
// power iteration with error feedback, plain AllReduce for the first --start-powersgd-iter
// synced backward passes; Note [PowerSGD]). none (default) is DDP without a hook.
// The CNN and hyper-parameters are those of bench/torch/fashion_mnist.py
// (models/small_cnn.h; SGD lr 0.05 momentum 0.9); PyTorch's twin of this program is
// bench/figures/torch_nosync_convergence.py.
//
// Output (rank 0), per S: one JSON line per iteration {"sync_every", "iter", "sync", "loss"}
// with rank 0's unscaled batch loss, then a summary with test accuracy (the 10,000 test images),
// optimizer steps, seconds and whether all ranks ended with the same parameters, plus the
// hook and wire_ratio: the values each rank sends per synced iteration relative to DDP's
// float32 AllReduce of every gradient, in bytes (see wire_ratio() below; PowerSGD counted
// after its start iteration).
//
// Read before: distributed/ddp/distributed_data_parallel.h (no_sync), models/small_cnn.h.
// Read next: bench/figures/fig11.sh.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tools/cli.h"
#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/nn_ops.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "data/data.h"
#include "distributed/distributed.h"
#include "models/models.h"
#include "optim/sgd.h"

namespace {

namespace ls = lockstep;
namespace dist = lockstep::distributed;

struct Options {
  int64_t batch = 32, iters = 400, threads = 1;
  std::vector<int64_t> sync_every = {1};
  double lr = 0.05, momentum = 0.9;
  uint64_t seed = 0;
  std::string root = ls::data::FashionMNIST::kDefaultRoot;
  std::string comm_hook = "none";  // none | allreduce | fp16 | bf16 | powersgd
  int64_t powersgd_rank = 1, start_powersgd_iter = 10;
};

Options parse(int argc, char** argv) {
  Options o;
  ls::cli::Program p("bench_nosync_convergence", "Fashion-MNIST convergence under 2-rank DDP with gradient "
                                                 "accumulation (no_sync) or a communication hook; JSON lines.");
  p.integer("--batch", o.batch, "examples per step on each rank", 1, 60000);
  p.integer("--iters", o.iters, "iterations per run", 1, 10000000);
  p.integers("--sync-every", o.sync_every, "runs, one per value: sync every S iterations", 1, 1000000);
  p.threads(o.threads);
  p.real("--lr", o.lr, "SGD learning rate", 0.0, 1000.0, /*above_lo=*/true);
  p.real("--momentum", o.momentum, "SGD momentum", 0.0, 1.0);
  p.integer("--seed", o.seed, "seed of the weights and the data order", 0);
  p.text("--root", o.root, "Fashion-MNIST directory");
  p.choice("--comm-hook", o.comm_hook, "DDP communication hook", {"none", "allreduce", "fp16", "bf16", "powersgd"});
  p.integer("--powersgd-rank", o.powersgd_rank, "PowerSGD matrix rank", 1, 1 << 20);
  p.integer("--start-powersgd-iter", o.start_powersgd_iter, "plain AllReduce before this iteration", 0);
  p.parse(argc, argv);
  p.environment([] { return ls::distributed::launched_world_size(); });
  return o;
}

double test_accuracy(ls::models::SmallCNN& model, const ls::data::FashionMNIST& test) {
  ls::NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0;
  ls::data::DataLoader loader(test, ls::data::DataLoaderOptions(1000).workers(1));
  for (const auto& batch : loader) {
    ls::Tensor pred = model.forward(batch.data).argmax(1);  // (B)
    correct += pred.eq(batch.target).sum().item<int64_t>();
  }
  model.train();
  return static_cast<double>(correct) / static_cast<double>(test.size());
}

double checksum(const std::vector<ls::Tensor>& params) {
  double sum = 0.0;
  for (const ls::Tensor& p : params) {
    ls::Tensor c = p.contiguous();
    const float* d = c.data_ptr<float>();
    for (int64_t i = 0; i < c.numel(); ++i) sum += static_cast<double>(d[i]) * (1.0 + (i % 7));
  }
  return sum;
}

// Values sent per synced iteration relative to a float32 AllReduce of every gradient,
// weighted by bytes per value. fp16/bf16: 2 of 4 bytes. PowerSGD (Note [PowerSGD]): a
// gradient with more than one dimension, seen as (n, m) with n = size(0), is sent as
// P (n, r) and Q (m, r) with r = min(R, n, m) when (n + m) r * min_compression_rate < n m
// (PowerSGDOptions' default 2); every other gradient goes uncompressed. Both are AllReduced
// the same way, so the ratio of values is the ratio of bytes each rank sends.
double wire_ratio(const Options& o, const std::vector<ls::Tensor>& params) {
  if (o.comm_hook == "fp16" || o.comm_hook == "bf16") return 0.5;
  if (o.comm_hook != "powersgd") return 1.0;
  const double min_rate = ls::distributed::comm_hooks::PowerSGDOptions().min_compression_rate();
  double full = 0.0, sent = 0.0;
  for (const ls::Tensor& p : params) {
    const int64_t numel = p.numel();
    full += static_cast<double>(numel);
    if (p.dim() < 2) {
      sent += static_cast<double>(numel);
      continue;
    }
    const int64_t n = p.size(0), m = numel / n;
    const int64_t r = std::min({o.powersgd_rank, n, m});
    const bool compress = static_cast<double>((n + m) * r) * min_rate < static_cast<double>(n * m);
    sent += compress ? static_cast<double>((n + m) * r) : static_cast<double>(numel);
  }
  return sent / full;
}

// Registers o.comm_hook on `ddp` (nothing for "none").
template <class M>
void register_hook(const Options& o, dist::DistributedDataParallel<M>& ddp,
                   const std::shared_ptr<dist::ProcessGroup>& pg) {
  namespace hooks = dist::comm_hooks;
  if (o.comm_hook == "allreduce") ddp.register_comm_hook(pg, hooks::allreduce_hook);
  else if (o.comm_hook == "fp16") ddp.register_comm_hook(pg, hooks::fp16_compress_hook);
  else if (o.comm_hook == "bf16") ddp.register_comm_hook(pg, hooks::bf16_compress_hook);
  else if (o.comm_hook == "powersgd") {
    auto state = std::make_shared<hooks::PowerSGDState>(
        pg, hooks::PowerSGDOptions()
                .matrix_approximation_rank(o.powersgd_rank)
                .start_powersgd_iter(o.start_powersgd_iter)
                .random_seed(o.seed));
    ddp.register_comm_hook(state, hooks::powersgd_hook);
  }
}

// Trains a fresh model for o.iters iterations synchronizing every `sync_every`; returns
// whether all ranks ended with the same parameters.
bool train(const Options& o, int64_t sync_every, std::shared_ptr<dist::ProcessGroup> pg,
           const ls::data::FashionMNIST& train, const ls::data::FashionMNIST& test) {
  const int rank = pg->rank(), world = pg->size();
  ls::manual_seed(o.seed);
  auto model = std::make_shared<ls::models::SmallCNN>();
  dist::DistributedDataParallel<ls::models::SmallCNN> ddp(model, pg);
  register_hook(o, ddp, pg);
  ls::optim::SGD sgd(model->parameters(), ls::optim::SGDOptions(o.lr).momentum(o.momentum));
  ls::data::DistributedSampler sampler(train.size(), world, rank, /*shuffle=*/true, o.seed);
  ls::data::DataLoader loader(train, ls::data::DataLoaderOptions(o.batch).workers(1), sampler);

  const auto t0 = std::chrono::steady_clock::now();
  int64_t it = 0, steps = 0;
  for (int64_t epoch = 0; it < o.iters; ++epoch) {
    sampler.set_epoch(epoch);
    for (const auto& batch : loader) {
      if (it == o.iters) break;
      const bool sync = (it + 1) % sync_every == 0;
      ls::Tensor loss;
      auto step = [&] {
        loss = ls::cross_entropy(ddp.forward(batch.data), batch.target);  // (N, 10) vs (N)
        (loss * (1.0 / static_cast<double>(sync_every))).backward();
      };
      if (sync) {
        step();
        sgd.step();
        sgd.zero_grad();
        ++steps;
      } else {
        auto guard = ddp.no_sync();
        step();
      }
      if (rank == 0) {
        std::printf("{\"bench\":\"nosync\",\"sync_every\":%lld,\"iter\":%lld,\"sync\":%s,"
                    "\"loss\":%.5f}\n",
                    static_cast<long long>(sync_every), static_cast<long long>(it),
                    sync ? "true" : "false", loss.item<double>());
      }
      ++it;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ls::Tensor sums = ls::full({2}, checksum(model->parameters()), ls::TensorOptions().dtype(ls::kFloat64));
  sums.narrow(0, 1, 1).mul_(-1.0);  // (max, -min) in one MAX allreduce
  pg->allreduce(sums, dist::ReduceOp::MAX)->wait(pg->timeout());
  const std::vector<double> s = sums.to_vector<double>();
  const bool equal = s[0] == -s[1];
  if (rank == 0) {
    std::printf(
        "{\"bench\":\"nosync\",\"summary\":true,\"framework\":\"lockstep\",\"world\":%d,"
        "\"batch\":%lld,\"sync_every\":%lld,\"iters\":%lld,\"steps\":%lld,\"lr\":%g,"
        "\"seconds\":%.2f,\"test_accuracy\":%.4f,\"comm_hook\":\"%s\",\"powersgd_rank\":%lld,"
        "\"start_powersgd_iter\":%lld,\"wire_ratio\":%.5f,\"replicas_equal\":%s}\n",
        world, static_cast<long long>(o.batch), static_cast<long long>(sync_every),
        static_cast<long long>(o.iters), static_cast<long long>(steps), o.lr, seconds,
        test_accuracy(*model, test), o.comm_hook.c_str(), static_cast<long long>(o.powersgd_rank),
        static_cast<long long>(o.start_powersgd_iter), wire_ratio(o, model->parameters()),
        equal ? "true" : "false");
    std::fflush(stdout);
  }
  return equal;
}

int run(const Options& o) {
  ls::set_num_threads(static_cast<int>(o.threads));
  const bool launched = std::getenv("RANK") != nullptr || std::getenv("OMPI_COMM_WORLD_RANK") != nullptr;
  dist::InitOptions init;
  if (!launched) init = init.rank(0).world_size(1).store(std::make_shared<dist::HashStore>());
  auto pg = dist::init_process_group("gloo", init);
  ls::data::FashionMNIST train_set(o.root, /*train=*/true);
  ls::data::FashionMNIST test_set(o.root, /*train=*/false);
  bool all_equal = true;
  for (int64_t s : o.sync_every) all_equal = train(o, s, pg, train_set, test_set) && all_equal;
  return all_equal ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  return ls::cli::run("bench_nosync_convergence", [&] { return run(parse(argc, argv)); });
}
