// examples/train_fashion_mnist.cpp — trains the small CNN on Fashion-MNIST.
//
// The network and hyper-parameters are those of bench/torch/fashion_mnist.py
// (conv 32 - conv 64 - fc 128 - fc 10, SGD lr 0.05 momentum 0.9, batch 64), so
// accuracy per epoch can be compared with PyTorch's. Each epoch ends with a
// test-set evaluation and a checkpoint (model + optimizer state, one
// safetensors file written atomically); `--resume` continues from it and gives
// the same results as an uninterrupted run, because the data order depends only
// on (seed, epoch) (DistributedSampler) and everything else is in the file.
//
// Distributed: run it under the launcher (or mpirun) and it trains with
// DistributedDataParallel over Gloo: each rank takes its DistributedSampler
// shard of every epoch (batch 64 per rank); rank 0 prints and writes the
// checkpoint while the other ranks wait for it (save_on_rank0).
//   build/bin/lockstep-run --nproc-per-node 2 -- build/bin/train_fashion_mnist --epochs 2
// The checkpoint holds the plain module's state, so a single process can load it.
//
// Learning rate: constant by default (as the PyTorch reference); `--schedule
// cosine` decays it per step from --lr to 0 over all epochs
// (CosineAnnealingLR), which the README's main job uses: the last steps at a
// small lr settle the weights, so the end-of-training accuracy swings less
// from seed to seed.
//
// `--stop-after-epoch K` ends this run after epoch K (checkpoint written), as a
// job with a time limit would; a later `--resume` with the same arguments
// finishes the run as if it had never stopped. `--test-limit N` evaluates on
// the first N test images only (for quick checks).
//
// Fault injection, for tests only (tests/examples/check_ddp_kill_resume.sh):
// LOCKSTEP_TEST_SIGKILL_AT=R:E:S makes rank R kill itself with SIGKILL just
// before step S (1-based) of epoch E (1-based), as if the machine had killed it.
//
// Usage: build/bin/train_fashion_mnist [--epochs 4] [--batch 64] [--lr 0.05]
//          [--schedule constant|cosine] [--threads 1] [--log-every 100] [--limit N]
//          [--checkpoint PATH] [--resume] [--stop-after-epoch K] [--test-limit N]
//          [--root /usr/share/datasets/fashion-mnist] [--seed 0]
#include <lockstep.h>

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <array>
#include <filesystem>
#include <string>

namespace ls = lockstep;

namespace {

struct Args {
  std::string root = ls::data::FashionMNIST::kDefaultRoot;
  std::string checkpoint = "fashion_mnist_checkpoint.safetensors";
  std::string schedule = "constant";
  int64_t epochs = 4, batch = 64, threads = 1, log_every = 100, limit = 0, stop_after_epoch = 0;
  int64_t test_limit = 0;
  double lr = 0.05, momentum = 0.9;
  uint64_t seed = 0;
  bool resume = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "train_fashion_mnist: %s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--root") a.root = value();
    else if (k == "--checkpoint") a.checkpoint = value();
    else if (k == "--epochs") a.epochs = std::stoll(value());
    else if (k == "--batch") a.batch = std::stoll(value());
    else if (k == "--threads") a.threads = std::stoll(value());
    else if (k == "--log-every") a.log_every = std::stoll(value());
    else if (k == "--limit") a.limit = std::stoll(value());
    else if (k == "--lr") a.lr = std::stod(value());
    else if (k == "--seed") a.seed = std::stoull(value());
    else if (k == "--schedule") a.schedule = value();
    else if (k == "--stop-after-epoch") a.stop_after_epoch = std::stoll(value());
    else if (k == "--test-limit") a.test_limit = std::stoll(value());
    else if (k == "--resume") a.resume = true;
    else {
      std::fprintf(stderr, "train_fashion_mnist: unknown argument %s (see the file header for usage)\n",
                   k.c_str());
      std::exit(2);
    }
  }
  if (a.schedule != "constant" && a.schedule != "cosine") {
    std::fprintf(stderr, "train_fashion_mnist: --schedule must be constant or cosine, not %s\n",
                 a.schedule.c_str());
    std::exit(2);
  }
  return a;
}

// Model and optimizer state in one file: "model.<name>" and "optim.<key>" tensors,
// the finished epoch count in the metadata. Distributed: rank 0 writes and every
// rank waits until the file is complete (distributed/checkpoint.h).
void save_checkpoint(const std::string& path, const ls::nn::Module& model,
                     const ls::optim::Optimizer& opt, int64_t epochs_done,
                     ls::distributed::ProcessGroup* pg) {
  std::map<std::string, ls::Tensor> all;
  for (auto& [k, v] : model.state_dict()) all["model." + k] = v;
  for (auto& [k, v] : opt.state_dict()) all["optim." + k] = v;
  const ls::nn::Metadata meta{{"epochs_done", std::to_string(epochs_done)}};
  if (pg != nullptr) ls::distributed::save_on_rank0(all, path, *pg, meta);
  else ls::nn::save_tensors(all, path, meta);
}

int64_t load_checkpoint(const std::string& path, ls::nn::Module& model, ls::optim::Optimizer& opt) {
  ls::nn::Metadata meta;
  auto all = ls::nn::load_tensors(path, &meta);
  ls::nn::StateDict model_state;
  ls::optim::OptimizerState opt_state;
  for (auto& [k, v] : all) {
    if (k.rfind("model.", 0) == 0) model_state[k.substr(6)] = v;
    if (k.rfind("optim.", 0) == 0) opt_state[k.substr(6)] = v;
  }
  model.load_state_dict(model_state);
  opt.load_state_dict(opt_state);
  LS_CHECK(meta.count("epochs_done"), "checkpoint ", path, " has no epochs_done metadata");
  return std::stoll(meta.at("epochs_done"));
}

// Accuracy on the first `limit` test images (all when limit is 0).
double evaluate(ls::models::SmallCNN& model, const ls::data::FashionMNIST& test, int64_t limit) {
  ls::NoGradGuard no_grad;
  model.eval();
  const int64_t n = limit > 0 ? std::min<int64_t>(limit, test.size()) : test.size();
  int64_t correct = 0, seen = 0;
  ls::data::DataLoader loader(test, ls::data::DataLoaderOptions(1000).workers(1));
  for (const auto& batch : loader) {
    if (seen >= n) break;
    const int64_t b = std::min<int64_t>(batch.data.size(0), n - seen);
    ls::Tensor pred = model.forward(batch.data.narrow(0, 0, b)).argmax(1);  // (b)
    correct += pred.eq(batch.target.narrow(0, 0, b)).sum().item<int64_t>();
    seen += b;
  }
  model.train();
  return static_cast<double>(correct) / static_cast<double>(n);
}

// LOCKSTEP_TEST_SIGKILL_AT=R:E:S (see the file header): {R, E, S}, or {-1, -1, -1} when unset.
std::array<int64_t, 3> sigkill_point() {
  std::array<int64_t, 3> at{-1, -1, -1};
  const char* env = std::getenv("LOCKSTEP_TEST_SIGKILL_AT");
  if (env == nullptr || *env == '\0') return at;
  long long r = 0, e = 0, s = 0;
  char extra = 0;
  LS_CHECK(std::sscanf(env, "%lld:%lld:%lld%c", &r, &e, &s, &extra) == 3,
           "LOCKSTEP_TEST_SIGKILL_AT='", env, "' is not RANK:EPOCH:STEP (e.g. 1:2:5); unset it");
  at = {r, e, s};
  return at;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  try {
    ls::set_num_threads(static_cast<int>(a.threads));
    ls::manual_seed(a.seed);
    // Several ranks when started by lockstep-run / torchrun (WORLD_SIZE) or mpirun.
    const char* world_env = std::getenv("WORLD_SIZE");
    if (!world_env) world_env = std::getenv("OMPI_COMM_WORLD_SIZE");
    const bool distributed = world_env != nullptr && std::atoi(world_env) > 1;
    std::shared_ptr<ls::distributed::ProcessGroup> pg;
    if (distributed) pg = ls::distributed::init_process_group("gloo");
    const int rank = pg ? pg->rank() : 0;
    const int world = pg ? pg->size() : 1;
    const auto kill_at = sigkill_point();
    ls::data::FashionMNIST train(a.root, /*train=*/true);
    ls::data::FashionMNIST test(a.root, /*train=*/false);
    auto model = std::make_shared<ls::models::SmallCNN>();
    ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(a.lr).momentum(a.momentum));

    // Built before a resume loads the optimizer state, so its base lr is --lr.
    const int64_t n = a.limit > 0 ? std::min<int64_t>(a.limit, train.size()) : train.size();
    ls::data::DistributedSampler sampler(n, world, rank, /*shuffle=*/true, a.seed);
    const int64_t steps_per_epoch = (sampler.num_samples() + a.batch - 1) / a.batch;
    std::unique_ptr<ls::optim::CosineAnnealingLR> cosine;
    if (a.schedule == "cosine")
      cosine = std::make_unique<ls::optim::CosineAnnealingLR>(opt, a.epochs * steps_per_epoch);

    int64_t first_epoch = 0;
    if (a.resume && std::filesystem::exists(a.checkpoint)) {
      first_epoch = load_checkpoint(a.checkpoint, *model, opt);
      if (rank == 0) std::printf("resumed from %s after epoch %lld\n", a.checkpoint.c_str(),
                  static_cast<long long>(first_epoch));
      // The schedule depends only on the step count: replay it to where the run stopped.
      for (int64_t t = 0; cosine && t < first_epoch * steps_per_epoch; ++t) cosine->step();
    }
    std::unique_ptr<ls::distributed::DistributedDataParallel<ls::models::SmallCNN>> ddp;
    if (pg) ddp = std::make_unique<ls::distributed::DistributedDataParallel<ls::models::SmallCNN>>(model, pg);
    auto forward = [&](const ls::Tensor& x) { return ddp ? ddp->forward(x) : model->forward(x); };
    ls::data::DataLoader loader(train, ls::data::DataLoaderOptions(a.batch).workers(1), sampler);
    if (rank == 0) {
      std::printf("train_fashion_mnist: SmallCNN, %lld training examples, %d rank(s), batch %lld "
                  "per rank, SGD lr %.3g (%s) momentum %.2g, %lld thread(s) per rank\n",
                  static_cast<long long>(n), world, static_cast<long long>(a.batch), a.lr,
                  a.schedule.c_str(), a.momentum, static_cast<long long>(a.threads));
    }

    for (int64_t epoch = first_epoch; epoch < a.epochs; ++epoch) {
      sampler.set_epoch(epoch);
      auto t0 = std::chrono::steady_clock::now();
      auto window_start = t0;
      double loss_sum = 0;
      int64_t seen = 0, step = 0, window_examples = 0;
      for (const auto& batch : loader) {
        if (rank == kill_at[0] && epoch + 1 == kill_at[1] && step + 1 == kill_at[2]) {
          std::fprintf(stderr, "train_fashion_mnist: LOCKSTEP_TEST_SIGKILL_AT: rank %d kills itself before "
                       "epoch %lld step %lld\n", rank, static_cast<long long>(epoch + 1),
                       static_cast<long long>(step + 1));
          std::fflush(stderr);
          ::raise(SIGKILL);
        }
        opt.zero_grad();
        ls::Tensor loss = ls::nn::functional::cross_entropy(forward(batch.data), batch.target);
        loss.backward();
        opt.step();
        if (cosine) cosine->step();
        const int64_t b = batch.data.size(0);
        loss_sum += loss.item<double>() * static_cast<double>(b);
        seen += b;
        window_examples += b;
        if (++step % a.log_every == 0 && rank == 0) {
          auto now = std::chrono::steady_clock::now();
          double secs = std::chrono::duration<double>(now - window_start).count();
          std::printf("epoch %lld step %5lld loss %.4f examples/s %.0f\n",
                      static_cast<long long>(epoch + 1), static_cast<long long>(step),
                      loss.item<double>(), static_cast<double>(window_examples) / secs);
          std::fflush(stdout);
          window_start = now;
          window_examples = 0;
        }
      }
      double train_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (rank == 0) {  // replicas are identical: rank 0 evaluates and reports
        double accuracy = evaluate(*model, test, a.test_limit);
        std::printf("epoch %lld train_loss %.4f test_accuracy %.4f seconds %.1f examples/s %.0f\n",
                    static_cast<long long>(epoch + 1), loss_sum / static_cast<double>(seen), accuracy,
                    train_secs, static_cast<double>(seen * world) / train_secs);
        std::fflush(stdout);
      }
      save_checkpoint(a.checkpoint, *model, opt, epoch + 1, pg.get());
      if (epoch + 1 == a.stop_after_epoch) break;
    }
  } catch (const ls::Error& e) {
    std::fprintf(stderr, "train_fashion_mnist: %s\n", e.what());
    return 1;
  }
  return 0;
}
