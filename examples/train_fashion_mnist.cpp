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
// before step S (1-based) of epoch E (1-based), as if the machine had killed it;
// on the first attempt only (not after a launcher's restart).
//
// Restarted by a launcher (TORCHELASTIC_RESTART_COUNT > 0: torchrun or
// lockstep-run --max-restarts, Note [Restarts] in tools/lockstep_run.cpp), a run
// without --resume resumes as '--resume auto' (--overwrite no longer applies:
// the file is the failed attempt's own checkpoint), so the job continues from
// its last complete checkpoint and ends as if never interrupted.
//
// Command line: `train_fashion_mnist --help` (tools/cli.h, Note [Program command
// lines]); what --resume, --overwrite and a changed hyper-parameter on resume do:
// Note [Resume semantics] in examples/train_checkpoint.h.
#include <lockstep.h>

#include <signal.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "examples/train_checkpoint.h"
#include "tools/cli.h"

namespace ls = lockstep;

namespace {

const char* const kName = "train_fashion_mnist";

struct Args {
  train::HyperParameters h;
  std::vector<std::string> given;  // hyper-parameter flags given on the command line
  std::string root = ls::data::FashionMNIST::kDefaultRoot;
  std::string checkpoint = "fashion_mnist_checkpoint.safetensors";
  std::string resume = "off";  // off | on | auto
  bool overwrite = false;
  std::string amp = "off";  // bf16: forward passes under ls::AutocastGuard (not a checkpoint setting)
  int64_t threads = 1, log_every = 100, stop_after_epoch = 0, test_limit = 0;
  double momentum = 0.9;
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
  p.text("--checkpoint", a.checkpoint, "checkpoint file, written after every epoch");
  auto* resume = p.app()
                     .add_option("--resume", a.resume,
                                 "continue from --checkpoint, which must exist; '--resume auto' starts fresh when "
                                 "it does not. Hyper-parameters not given are the checkpoint's; one given applies "
                                 "from the next epoch on, and a line says when it differs")
                     ->expected(0, 1)
                     ->default_str("")  // a bare --resume gives "" (else CLI11 would take the default, "off")
                     ->check(CLI::Validator(
                         [](std::string& t) {
                           return t.empty() || t == "auto" ? std::string() : "expected nothing or 'auto', got '" + t + "'";
                         },
                         "", "resume"))
                     ->type_name("[auto]");
  p.flag("--overwrite", a.overwrite, "replace an existing --checkpoint (without it a fresh run refuses to)")
      ->excludes(resume);
  p.choice("--amp", a.amp, "mixed precision: bf16 runs the forward passes (training and test) under "
           "ls::AutocastGuard; weights, gradients and the optimizer stay float32", {"off", "bf16"});
  p.text("--root", a.root, "Fashion-MNIST directory (Debian package dataset-fashion-mnist)");
  p.app().footer("A fresh run refuses to overwrite an existing checkpoint (use --resume or --overwrite), and\n"
                 "checks that the checkpoint's directory is writable before training.\n" +
                 p.app().get_footer());
  p.parse(argc, argv);
  if (a.resume.empty()) a.resume = "on";  // a bare --resume
  for (const char* flag : {"--epochs", "--batch", "--lr", "--schedule", "--seed", "--limit"}) {
    if (p.app().count(flag) > 0) a.given.push_back(flag);
  }
  return a;
}

// Model and optimizer state in one file: "model.<name>" and "optim.<key>" tensors;
// the finished epoch count and the hyper-parameters in the metadata
// (examples/train_checkpoint.h). Distributed: rank 0 writes and every rank waits
// until the file is complete (distributed/checkpoint.h).
void save_checkpoint(const std::string& path, const ls::nn::Module& model, const ls::optim::Optimizer& opt,
                     const train::HyperParameters& h, int64_t epochs_done, ls::distributed::ProcessGroup* pg) {
  std::map<std::string, ls::Tensor> all;
  for (auto& [k, v] : model.state_dict()) all["model." + k] = v;
  for (auto& [k, v] : opt.state_dict()) all["optim." + k] = v;
  const ls::nn::Metadata meta = train::to_metadata(h, epochs_done);
  if (pg != nullptr) ls::distributed::save_on_rank0(all, path, *pg, meta);
  else ls::nn::save_tensors(all, path, meta);
}

void load_state(const std::map<std::string, ls::Tensor>& all, ls::nn::Module& model, ls::optim::Optimizer& opt) {
  ls::nn::StateDict model_state;
  ls::optim::OptimizerState opt_state;
  for (auto& [k, v] : all) {
    if (k.rfind("model.", 0) == 0) model_state[k.substr(6)] = v;
    if (k.rfind("optim.", 0) == 0) opt_state[k.substr(6)] = v;
  }
  model.load_state_dict(model_state);
  opt.load_state_dict(opt_state);
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

int run(ls::cli::Program& program, Args a) {
  ls::set_num_threads(static_cast<int>(a.threads));
  // Several ranks when started by lockstep-run / torchrun (WORLD_SIZE) or mpirun.
  const int launched = program.environment([] { return ls::distributed::launched_world_size().value_or(1); });
  std::shared_ptr<ls::distributed::ProcessGroup> pg;
  if (launched > 1) {
    program.environment([] { return ls::distributed::resolve_rendezvous(); });  // RANK=abc: exit 2, not 1
    pg = ls::distributed::init_process_group("gloo");
  }
  const int rank = pg ? pg->rank() : 0;
  const int world = pg ? pg->size() : 1;
  const int restart = program.environment([] { return ls::distributed::restart_count(); });
  const auto kill_at = restart == 0 ? sigkill_point() : std::array<int64_t, 3>{-1, -1, -1};
  if (restart > 0 && a.resume == "off") {
    a.resume = "auto";
    a.overwrite = false;
    if (rank == 0) std::printf("restart %d: resuming from --checkpoint when it exists (--resume auto)\n", restart);
  }

  // Note [Resume semantics] (examples/train_checkpoint.h): decided before any training.
  if (rank == 0) {
    if (const std::string why = train::probe_writable(a.checkpoint); !why.empty()) program.usage_error(why);
  }
  const bool exists = std::filesystem::exists(a.checkpoint);
  if (a.resume == "on" && !exists) {
    program.usage_error("--resume: no checkpoint at " + a.checkpoint + " to resume from; run without --resume to "
                        "start fresh, or pass '--resume auto' to start fresh when there is none");
  }
  if (a.resume == "auto" && !exists && rank == 0) {
    std::printf("no checkpoint found at %s, starting fresh\n", a.checkpoint.c_str());
  }
  const bool resuming = a.resume != "off" && exists;
  if (!resuming && exists && !a.overwrite) {
    program.usage_error("the checkpoint " + a.checkpoint + " exists; pass --resume to continue it, --overwrite to "
                        "replace it, or --checkpoint to choose another file");
  }
  std::map<std::string, ls::Tensor> saved;
  int64_t first_epoch = 0;
  train::HyperParameters h = a.h;
  if (resuming) {
    ls::nn::Metadata meta;
    saved = ls::nn::load_tensors(a.checkpoint, &meta);
    first_epoch = train::epochs_done(meta, a.checkpoint);
    h = train::resolve_on_resume(a.h, a.given, meta, a.checkpoint, first_epoch, rank == 0 ? stdout : nullptr);
  }

  ls::manual_seed(h.seed);
  ls::data::FashionMNIST train_set(a.root, /*train=*/true);
  ls::data::FashionMNIST test(a.root, /*train=*/false);
  auto model = std::make_shared<ls::models::SmallCNN>();
  ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(h.lr).momentum(a.momentum));

  // Built before a resume loads the optimizer state, so its base lr is h.lr.
  const int64_t n = h.limit > 0 ? std::min<int64_t>(h.limit, train_set.size()) : train_set.size();
  ls::data::DistributedSampler sampler(n, world, rank, /*shuffle=*/true, h.seed);
  const int64_t steps_per_epoch = (sampler.num_samples() + h.batch - 1) / h.batch;
  std::unique_ptr<ls::optim::CosineAnnealingLR> cosine;
  if (h.schedule == "cosine") cosine = std::make_unique<ls::optim::CosineAnnealingLR>(opt, h.epochs * steps_per_epoch);

  if (resuming) {
    load_state(saved, *model, opt);
    saved.clear();
    if (rank == 0) std::printf("resumed from %s after epoch %lld\n", a.checkpoint.c_str(),
                               static_cast<long long>(first_epoch));
    // The lr applies (Note [Resume semantics]); the schedule depends only on the
    // step count: replay it to where the run stopped.
    opt.set_lr(h.lr);
    for (int64_t t = 0; cosine && t < first_epoch * steps_per_epoch; ++t) cosine->step();
    if (first_epoch >= h.epochs && rank == 0) {
      std::printf("nothing to train: the checkpoint has %lld of --epochs %lld; pass a larger --epochs to go on\n",
                  static_cast<long long>(first_epoch), static_cast<long long>(h.epochs));
    }
  }
  std::unique_ptr<ls::distributed::DistributedDataParallel<ls::models::SmallCNN>> ddp;
  if (pg) ddp = std::make_unique<ls::distributed::DistributedDataParallel<ls::models::SmallCNN>>(model, pg);
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
      if (rank == kill_at[0] && epoch + 1 == kill_at[1] && step + 1 == kill_at[2]) {
        std::fprintf(stderr, "train_fashion_mnist: LOCKSTEP_TEST_SIGKILL_AT: rank %d kills itself before "
                     "epoch %lld step %lld\n", rank, static_cast<long long>(epoch + 1),
                     static_cast<long long>(step + 1));
        std::fflush(stderr);
        ::raise(SIGKILL);
      }
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
      double accuracy = evaluate(*model, test, a.test_limit, a.amp == "bf16");
      std::printf("epoch %lld train_loss %.4f test_accuracy %.4f seconds %.1f examples/s %.0f\n",
                  static_cast<long long>(epoch + 1), loss_sum / static_cast<double>(seen), accuracy,
                  train_secs, static_cast<double>(seen * world) / train_secs);
      std::fflush(stdout);
    }
    save_checkpoint(a.checkpoint, *model, opt, h, epoch + 1, pg.get());
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
