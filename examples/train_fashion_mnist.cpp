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
// Restarted by a launcher (torchrun or lockstep-run --max-restarts) it resumes
// from its last checkpoint, and LOCKSTEP_TEST_SIGKILL_AT kills a rank for the
// tests: Note [Resuming on a restart] in examples/train_run.h (shared with
// examples/train_ddp.cpp).
//
// Command line: `train_fashion_mnist --help` (tools/cli.h, Note [Program command
// lines]); what --resume, --overwrite and a changed hyper-parameter on resume do:
// Note [Resume semantics] in examples/train_checkpoint.h.
#include <lockstep.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "examples/train_run.h"
#include "tools/cli.h"

namespace ls = lockstep;

namespace {

const char* const kName = "train_fashion_mnist";

struct Args {
  train::HyperParameters h;
  std::vector<std::string> given;  // hyper-parameter flags given on the command line
  std::string root = ls::data::FashionMNIST::kDefaultRoot;
  train::CheckpointArgs ckpt{"fashion_mnist_checkpoint.safetensors"};
  std::string amp = "off";  // bf16: forward passes under ls::AutocastGuard (not a checkpoint setting)
  int64_t threads = 1, log_every = 100, stop_after_epoch = 0, test_limit = 0;
  double momentum = 0.9;
  bool deterministic = false;  // DDPOptions().deterministic: see train::kDeterministicHelp
};

Args parse(ls::cli::Program& p, int argc, char** argv) {
  Args a;
  p.integer("--epochs", a.h.epochs, "epochs to train in all (a resumed run counts the checkpoint's)", 1, 100000);
  p.integer("--batch", a.h.batch, "examples per step on each rank", 1, 60000);
  p.real("--lr", a.h.lr, "SGD learning rate (momentum 0.9)", 0.0, 1000.0, /*above_lo=*/true);
  p.choice("--schedule", a.h.schedule, "constant lr, or cosine decay from --lr to 0 over all epochs",
           {"constant", "cosine"});
  p.integer("--seed", a.h.seed, "seed of the weights and the data order", 0);
  p.integer("--limit", a.h.limit, "train on the first N images only (0: all 60000)", 0);
  p.threads(a.threads);
  p.integer("--log-every", a.log_every, "print the loss every N steps", 1);
  p.integer("--test-limit", a.test_limit, "evaluate on the first N test images only (0: all)", 0);
  p.integer("--stop-after-epoch", a.stop_after_epoch, "end this run after epoch K, checkpoint written (0: never)", 0);
  train::add_checkpoint_options(p, a.ckpt);
  p.switch01("--deterministic", a.deterministic, train::kDeterministicHelp);
  p.choice("--amp", a.amp, "mixed precision: bf16 runs the forward passes (training and test) under "
           "ls::AutocastGuard; weights, gradients and the optimizer stay float32", {"off", "bf16"});
  p.text("--root", a.root, "Fashion-MNIST directory (Debian package dataset-fashion-mnist)");
  p.parse(argc, argv);
  a.given = train::given_flags(p);
  return a;
}

// Accuracy on the first `limit` test images (all when limit is 0).
double evaluate(ls::models::SmallCNN& model, const ls::data::FashionMNIST& test, int64_t limit,
                bool amp) {
  ls::NoGradGuard no_grad;
  ls::AutocastGuard autocast(ls::kBFloat16, amp);
  model.eval();
  const int64_t n = limit > 0 ? std::min<int64_t>(limit, test.size()) : test.size();
  int64_t correct = 0, seen = 0;
  ls::data::DataLoader loader(test, ls::data::DataLoaderOptions(1000).workers(1));
  for (const auto& batch : loader) {
    if (seen >= n) break;
    const int64_t b = std::min<int64_t>(batch.data.size(0), n - seen);
    ls::Tensor logits = model.forward(batch.data.narrow(0, 0, b)).to(ls::kFloat32);  // (b, 10)
    ls::Tensor pred = logits.argmax(1);                                            // (b)
    correct += pred.eq(batch.target.narrow(0, 0, b)).sum().item<int64_t>();
    seen += b;
  }
  model.train();
  return static_cast<double>(correct) / static_cast<double>(n);
}

int run(ls::cli::Program& program, Args a) {
  ls::set_num_threads(static_cast<int>(a.threads));
  // Several ranks when started by lockstep-run / torchrun (WORLD_SIZE), mpirun or srun.
  std::shared_ptr<ls::distributed::ProcessGroup> pg = train::process_group(program);
  const int rank = pg ? pg->rank() : 0;
  const int world = pg ? pg->size() : 1;
  // Note [Resume semantics] (examples/train_checkpoint.h): decided before any training.
  train::Start start = train::start(program, a.ckpt, a.h, a.given, rank,
                                    train::RunSettings{world, a.amp, a.deterministic});
  const train::HyperParameters& h = start.h;
  if (pg) train::check_same_hyper_parameters(h, *pg);  // e.g. --batch 5 on one rank, 6 on another
  const int64_t first_epoch = start.first_epoch;

  ls::manual_seed(h.seed);
  ls::data::FashionMNIST train_set(a.root, /*train=*/true);
  ls::data::FashionMNIST test(a.root, /*train=*/false);
  auto model = std::make_shared<ls::models::SmallCNN>();
  ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(h.lr).momentum(a.momentum));

  // Built before a resume loads the optimizer state, so its base lr is h.lr.
  const int64_t n = h.limit > 0 ? std::min<int64_t>(h.limit, train_set.size()) : train_set.size();
  LS_CHECK(n > 0, "the training set in ", a.root, " holds no images; there is nothing to train on "
           "(check --root, or the files there)");
  ls::data::DistributedSampler sampler(n, world, rank, /*shuffle=*/true, h.seed);
  const int64_t steps_per_epoch = (sampler.num_samples() + h.batch - 1) / h.batch;
  std::unique_ptr<ls::optim::CosineAnnealingLR> cosine;
  if (h.schedule == "cosine") cosine = std::make_unique<ls::optim::CosineAnnealingLR>(opt, h.epochs * steps_per_epoch);

  train::resume(start, a.ckpt.checkpoint, *model, opt, rank);
  // The schedule depends only on the step count: replay it to where the run stopped.
  for (int64_t t = 0; cosine && t < first_epoch * steps_per_epoch; ++t) cosine->step();
  std::unique_ptr<ls::distributed::DistributedDataParallel<ls::models::SmallCNN>> ddp;
  if (pg) {
    ddp = std::make_unique<ls::distributed::DistributedDataParallel<ls::models::SmallCNN>>(
        model, pg, ls::distributed::DDPOptions().deterministic(a.deterministic));
    ddp->register_optimizer(opt);  // the replica check compares step counts too (Note [Optimizer step check])
  }
  auto forward = [&](const ls::Tensor& x) { return ddp ? ddp->forward(x) : model->forward(x); };
  ls::data::DataLoader loader(train_set, ls::data::DataLoaderOptions(h.batch).workers(1), sampler);
  if (rank == 0) {
    std::printf("train_fashion_mnist: SmallCNN, %lld training examples, %d rank(s), batch %lld "
                "per rank, SGD lr %.3g (%s) momentum %.2g, %lld thread(s) per rank%s\n",
                static_cast<long long>(n), world, static_cast<long long>(h.batch), h.lr,
                h.schedule.c_str(), a.momentum, static_cast<long long>(a.threads),
                a.amp == "bf16" ? ", bf16 autocast" : "");
  }

  for (int64_t epoch = first_epoch; epoch < h.epochs; ++epoch) {
    sampler.set_epoch(epoch);
    auto t0 = std::chrono::steady_clock::now();
    auto window_start = t0;
    double loss_sum = 0;
    int64_t seen = 0, step = 0, window_examples = 0;
    for (const auto& batch : loader) {
      train::maybe_kill(start, rank, epoch, step, kName);
      opt.zero_grad();
      ls::Tensor loss;
      {
        ls::AutocastGuard autocast(ls::kBFloat16, a.amp == "bf16");  // Note [Autocast policy]
        loss = ls::nn::functional::cross_entropy(forward(batch.data), batch.target);
      }
      loss.backward();
      opt.step();
      if (cosine) cosine->step();
      const int64_t b = batch.data.size(0);
      loss_sum += train::finite_loss(loss, rank, epoch, step + 1) * static_cast<double>(b);
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
      double accuracy = evaluate(*model, test, a.test_limit, a.amp == "bf16");
      std::printf("epoch %lld train_loss %.4f test_accuracy %.4f seconds %.1f examples/s %.0f\n",
                  static_cast<long long>(epoch + 1), loss_sum / static_cast<double>(seen), accuracy,
                  train_secs, static_cast<double>(seen * world) / train_secs);
      std::fflush(stdout);
    }
    train::maybe_diverge(start, rank, epoch, *model, opt, kName);
    train::save_checkpoint(a.ckpt.checkpoint, *model, opt, start, epoch + 1, pg.get(), ddp.get());
    if (epoch + 1 == a.stop_after_epoch) break;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ls::cli::Program program(kName, "Trains the small CNN on Fashion-MNIST (one process, or DDP over Gloo under "
                                "lockstep-run / mpirun), with a checkpoint after every epoch.");
  Args args = parse(program, argc, argv);
  return ls::cli::run(kName, [&] { return run(program, args); });
}
