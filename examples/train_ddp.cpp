// examples/train_ddp.cpp — the DDP example: a program written against docs/api.md that
// runs unchanged under every launcher (README "Launching": lockstep-run, torchrun, mpirun,
// srun) and, restarted by one, resumes from its last checkpoint.
//
// An MLP (2 -> 64 -> 64 -> 2, nn::Linear) learns to tell train_demo's two spiral arms
// apart (examples/spirals.h, 2 x 512 points). Under a launcher every rank takes its
// DistributedSampler shard of every epoch and DistributedDataParallel averages the
// gradients over Gloo; rank 0 prints the loss and accuracy per epoch and writes the
// checkpoint (model + SGD state, one safetensors file) after every epoch while the others
// wait for it. One process alone trains the same way without DDP.
//   build/bin/lockstep-run --nproc-per-node 2 --max-restarts 1 -- build/bin/train_ddp
//   torchrun --no-python --nproc-per-node 2 --max-restarts 1 build/bin/train_ddp
// Restarted by a launcher (TORCHELASTIC_RESTART_COUNT > 0) it resumes as '--resume auto'
// and ends with the same checkpoint bytes as an uninterrupted run: Note [Resuming on a
// restart] in examples/train_run.h, which it shares with train_fashion_mnist (so do
// --resume, --overwrite and the hyper-parameters recorded in the checkpoint: Note [Resume
// semantics] in examples/train_checkpoint.h). Command line: `train_ddp --help`.
// Read before: docs/api.md, examples/train_demo.cpp. Read next: tests/examples/check_ddp_restart.sh.
#include <lockstep.h>

#include <cstdio>
#include <memory>
#include <string>

#include "examples/spirals.h"
#include "examples/train_run.h"
#include "tools/cli.h"

namespace ls = lockstep;

namespace {

const char* const kName = "train_ddp";
const int64_t kPointsPerArm = 512;

struct Net : ls::nn::Module {
  std::shared_ptr<ls::nn::Linear> fc1, fc2, fc3;
  Net() {
    fc1 = register_module("fc1", std::make_shared<ls::nn::Linear>(2, 64));
    fc2 = register_module("fc2", std::make_shared<ls::nn::Linear>(64, 64));
    fc3 = register_module("fc3", std::make_shared<ls::nn::Linear>(64, 2));
  }
  ls::Tensor forward(const ls::Tensor& x) { return fc3->forward(fc2->forward(fc1->forward(x).relu()).relu()); }
};

struct Args {
  train::HyperParameters h{.epochs = 20, .batch = 32, .limit = 0, .lr = 0.1};
  std::vector<std::string> given;
  train::CheckpointArgs ckpt{"train_ddp_checkpoint.safetensors"};
  int64_t threads = 1;
  bool deterministic = false;  // DDPOptions().deterministic: see train::kDeterministicHelp
};

int run(ls::cli::Program& program, Args a) {
  ls::set_num_threads(static_cast<int>(a.threads));
  std::shared_ptr<ls::distributed::ProcessGroup> pg = train::process_group(program);  // null: one process
  const int rank = pg ? pg->rank() : 0;
  const int world = pg ? pg->size() : 1;
  train::Start start = train::start(program, a.ckpt, a.h, a.given, rank,
                                    train::RunSettings{world, "off", a.deterministic});
  const train::HyperParameters& h = start.h;
  if (pg) train::check_same_hyper_parameters(h, *pg);  // e.g. --batch 5 on one rank, 6 on another

  ls::manual_seed(h.seed);  // the same data and initial weights on every rank
  auto [x, onehot] = examples::make_spirals(kPointsPerArm);  // (1024, 2), (1024, 2)
  const ls::Tensor labels = onehot.argmax(1);                // (1024) int64
  ls::data::TensorDataset points(x, labels);
  auto net = std::make_shared<Net>();
  ls::optim::SGD opt(net->parameters(), ls::optim::SGDOptions(h.lr).momentum(0.9));
  train::resume(start, a.ckpt.checkpoint, *net, opt, rank);

  std::unique_ptr<ls::distributed::DistributedDataParallel<Net>> ddp;
  if (pg) {
    ddp = std::make_unique<ls::distributed::DistributedDataParallel<Net>>(
        net, pg, ls::distributed::DDPOptions().deterministic(a.deterministic));
    ddp->register_optimizer(opt);  // the replica check compares step counts too (Note [Optimizer step check])
  }
  ls::data::DistributedSampler sampler(points.size(), world, rank, /*shuffle=*/true, h.seed);
  ls::data::DataLoader loader(points, ls::data::DataLoaderOptions(h.batch).workers(1), sampler);
  if (rank == 0) {
    std::printf("train_ddp: MLP 2-64-64-2 on %lld spiral points, %d rank(s), batch %lld per rank, SGD lr %.3g "
                "momentum 0.9\n", static_cast<long long>(points.size()), world, static_cast<long long>(h.batch), h.lr);
  }
  for (int64_t epoch = start.first_epoch; epoch < h.epochs; ++epoch) {
    sampler.set_epoch(epoch);
    double loss_sum = 0;
    int64_t seen = 0, step = 0;
    for (const auto& batch : loader) {
      train::maybe_kill(start, rank, epoch, step++, kName);
      opt.zero_grad();
      ls::Tensor out = ddp ? ddp->forward(batch.data) : net->forward(batch.data);
      ls::Tensor loss = ls::nn::functional::cross_entropy(out, batch.target);
      loss.backward();
      opt.step();
      loss_sum += train::finite_loss(loss, rank, epoch, step) * static_cast<double>(batch.data.size(0));
      seen += batch.data.size(0);
    }
    if (rank == 0) {  // replicas are identical: rank 0 reports
      ls::NoGradGuard no_grad;
      const double accuracy = net->forward(x).argmax(1).eq(labels).to(ls::kFloat32).mean().item<double>();
      std::printf("epoch %lld train_loss %.4f accuracy %.4f\n", static_cast<long long>(epoch + 1),
                  loss_sum / static_cast<double>(seen), accuracy);
      std::fflush(stdout);
    }
    train::maybe_diverge(start, rank, epoch, *net, opt, kName);
    train::save_checkpoint(a.ckpt.checkpoint, *net, opt, start, epoch + 1, pg.get(), ddp.get());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ls::cli::Program program(kName, "The DDP example: an MLP learns two spiral arms apart, with DistributedDataParallel "
                                  "under any launcher, a checkpoint after every epoch, resumed on a restart.");
  Args a;
  program.integer("--epochs", a.h.epochs, "epochs to train in all (a resumed run counts the checkpoint's)", 1, 100000);
  program.integer("--batch", a.h.batch, "points per step on each rank", 1, 2 * kPointsPerArm);
  program.real("--lr", a.h.lr, "SGD learning rate (momentum 0.9)", 0.0, 1000.0, /*above_lo=*/true);
  program.integer("--seed", a.h.seed, "seed of the points, the weights and the data order", 0);
  program.threads(a.threads);
  train::add_checkpoint_options(program, a.ckpt);
  program.switch01("--deterministic", a.deterministic, train::kDeterministicHelp);
  program.parse(argc, argv);
  a.given = train::given_flags(program);
  return ls::cli::run(kName, [&] { return run(program, a); });
}
