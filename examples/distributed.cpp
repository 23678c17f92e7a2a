// examples/distributed.cpp — a port of pytorch/examples'
// cpp/distributed/dist-mnist.cpp to lockstep, written for lockstep's API:
// data-parallel training of the cpp/mnist network, one process per rank, each
// reading its shard of the training set.
//
// The original averages the gradients itself after backward: one allreduce
// per parameter, then a division by the number of ranks. Its own comment says
// that DistributedDataParallel would overlap that communication with the
// backward pass; this port does both: `--sync ddp` (the default) wraps the
// model in ls::distributed::DistributedDataParallel, `--sync allreduce` keeps
// the original's loop over named_parameters(). Either way every rank ends with
// the same weights; each rank prints a checksum of them, and rank 0 evaluates
// on the test set.
//   build/bin/lockstep-run --nproc-per-node 2 -- build/bin/distributed --epochs 2
//   mpirun -np 2 build/bin/distributed --backend mpi
// Differences from the original: Gloo under lockstep-run (or torchrun) as well
// as MPI under mpirun, and one process alone when no launcher started it; the
// sampler is lockstep's DistributedSampler (shuffled per epoch, like
// DistributedRandomSampler); the constants are options (`distributed --help`);
// the loss is nll_loss of the model's log-probabilities (the original applies
// log_softmax a second time, which changes nothing since log_softmax of
// log-probabilities is the identity); for scripts (bench/compare_examples_more.sh)
// each rank also prints "epoch E rank R train_accuracy A cpu_seconds C seconds S"
// after each epoch (the process CPU time of its training epoch, communication
// threads included) and rank 0 ends with "final test_accuracy A test_loss L".
// Read before: examples/mnist.cpp, distributed/ddp/distributed_data_parallel.h.
// Read next: docs/api.md ("Coming from libtorch").
#include <lockstep.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "examples/mnist_net.h"
#include "tools/cli.h"

namespace ls = lockstep;

namespace {

struct Options {
  std::string root = ls::data::FashionMNIST::kDefaultRoot;
  std::string backend = "gloo";
  std::string sync = "ddp";
  int64_t epochs = 10;
  int64_t total_batch_size = 64;
  int64_t seed = 0;
  int64_t threads = 1;
  double lr = 1e-2;
};

using Model = examples::MnistNet;  // the cpp/mnist network, in examples/mnist_net.h

// The original's gradient averaging: one allreduce per parameter, waited for, then / ranks.
void average_gradients(Model& model, ls::distributed::ProcessGroup& pg) {
  std::vector<std::shared_ptr<ls::distributed::Work>> works;
  for (auto& [name, param] : model.named_parameters()) {
    ls::Tensor grad = param.grad();  // shares the gradient's storage: reduced in place
    works.push_back(pg.allreduce(grad));
  }
  for (auto& work : works) work->wait();
  for (auto& [name, param] : model.named_parameters()) param.grad().div_(static_cast<double>(pg.size()));
}

// The sum of every parameter, in double: equal on every rank when the replicas are.
double checksum(Model& model) {
  double sum = 0;
  for (const ls::Tensor& p : model.parameters()) sum += p.sum().to(ls::kFloat64).item<double>();
  return sum;
}

int run(ls::cli::Program& program, const Options& o) {
  ls::set_num_threads(static_cast<int>(o.threads));
  // Several ranks when a launcher started them (WORLD_SIZE, or mpirun's variables); else one process.
  const std::optional<int> launched = program.environment([] { return ls::distributed::launched_world_size(); });
  std::shared_ptr<ls::distributed::ProcessGroup> pg;
  if (launched && *launched > 1) pg = ls::distributed::init_process_group(o.backend);
  const int numranks = pg ? pg->size() : 1;
  const int rank = pg ? pg->rank() : 0;
  if (o.total_batch_size < numranks) {
    program.usage_error("--batch " + std::to_string(o.total_batch_size) + " is smaller than the " +
                        std::to_string(numranks) + " ranks; each rank needs at least one example");
  }

  // TRAINING
  auto train_dataset = ls::data::datasets::MNIST(o.root)
                           .map(ls::data::transforms::Normalize<>(0.1307, 0.3081))
                           .map(ls::data::transforms::Stack<>());
  // Each rank's shard, reshuffled every epoch (the loader owns the sampler and sets its epoch).
  ls::data::DistributedSampler data_sampler(train_dataset.size(), numranks, rank, /*shuffle=*/true,
                                            static_cast<uint64_t>(o.seed));
  const int64_t num_train_samples_per_proc = data_sampler.num_samples();
  const int64_t batch_size_per_proc = o.total_batch_size / numranks;  // effective batch size per process
  auto data_loader = ls::data::make_data_loader(std::move(train_dataset), data_sampler, batch_size_per_proc);

  ls::manual_seed(static_cast<uint64_t>(o.seed));  // the same initial weights on every rank
  auto model = std::make_shared<Model>();
  std::unique_ptr<ls::distributed::DistributedDataParallel<Model>> ddp;
  if (pg && o.sync == "ddp") ddp = std::make_unique<ls::distributed::DistributedDataParallel<Model>>(model, pg);
  ls::optim::SGD optimizer(model->parameters(), ls::optim::SGDOptions(o.lr));
  if (rank == 0) {
    std::printf("distributed: %d rank(s), %s, batch %lld per rank, sync %s\n", numranks,
                pg ? o.backend.c_str() : "no process group", static_cast<long long>(batch_size_per_proc),
                pg ? o.sync.c_str() : "none");
  }

  for (int64_t epoch = 1; epoch <= o.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    int64_t num_correct = 0;
    for (auto& batch : *data_loader) {
      auto ip = batch.data;
      auto op = batch.target;
      model->zero_grad();                                             // reset gradients
      auto prediction = ddp ? ddp->forward(ip) : model->forward(ip);  // forward pass
      auto loss = ls::nll_loss(prediction, op);
      loss.backward();  // with DDP the gradients are averaged during backward
      if (pg && !ddp) average_gradients(*model, *pg);
      optimizer.step();  // update parameters
      auto guess = prediction.argmax(1);
      num_correct += ls::sum(guess.eq(op)).item<int64_t>();
    }
    const double accuracy = 100.0 * static_cast<double>(num_correct) / static_cast<double>(num_train_samples_per_proc);
    std::printf("Accuracy in rank %d in epoch %lld - %.2f\n", rank, static_cast<long long>(epoch), accuracy);
    std::printf("epoch %lld rank %d train_accuracy %.4f cpu_seconds %.2f seconds %.2f\n",
                static_cast<long long>(epoch), rank, accuracy / 100.0,
                static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    std::fflush(stdout);
  }
  std::printf("param checksum rank %d: %.17g\n", rank, checksum(*model));
  std::fflush(stdout);

  // TESTING ONLY IN RANK 0
  if (rank == 0) {
    auto test_dataset = ls::data::datasets::MNIST(o.root, ls::data::datasets::MNIST::Mode::kTest)
                            .map(ls::data::transforms::Normalize<>(0.1307, 0.3081))
                            .map(ls::data::transforms::Stack<>());
    const int64_t num_test_samples = test_dataset.size();
    auto test_loader = ls::data::make_data_loader(std::move(test_dataset), num_test_samples);
    model->eval();  // no dropout
    ls::NoGradGuard no_grad;
    int64_t num_correct = 0;
    double loss_sum = 0;  // the sum over the test set, for the "final" line
    for (auto& batch : *test_loader) {
      auto prediction = model->forward(batch.data);
      auto loss = ls::nll_loss(prediction, batch.target);
      std::printf("Test loss - %.4f\n", loss.item<float>());
      loss_sum += loss.item<double>() * static_cast<double>(batch.target.size(0));
      num_correct += ls::sum(prediction.argmax(1).eq(batch.target)).item<int64_t>();
    }
    const double accuracy = static_cast<double>(num_correct) / static_cast<double>(num_test_samples);
    std::printf("Num correct - %lld\n", static_cast<long long>(num_correct));
    std::printf("Test Accuracy - %.2f\n", 100.0 * accuracy);
    std::printf("final test_accuracy %.4f test_loss %.4f\n", accuracy, loss_sum / static_cast<double>(num_test_samples));
  }
  if (pg) pg->barrier()->wait();  // rank 0 tests while the others wait
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ls::cli::Program p("distributed", "pytorch/examples' cpp/distributed on lockstep: the cpp/mnist network "
                                    "trained data-parallel, with DDP or the original's allreduce loop.");
  Options o;
  p.text("--root", o.root, "directory in the MNIST layout (data/mnist.h): MNIST or Fashion-MNIST");
  p.choice("--backend", o.backend, "process group under a launcher: gloo (lockstep-run, torchrun) or "
           "mpi (mpirun)", {"gloo", "mpi"});
  p.choice("--sync", o.sync, "gradient averaging: DistributedDataParallel, or the original's "
           "allreduce per parameter after backward", {"ddp", "allreduce"});
  p.integer("--epochs", o.epochs, "number of epochs", 1, 100000);
  p.integer("--batch", o.total_batch_size, "total batch size, divided among the ranks", 1, 1000000);
  p.integer("--seed", o.seed, "seed of the weights and the data order", 0);
  p.real("--lr", o.lr, "SGD learning rate", 0.0, 1000.0, /*above_lo=*/true);
  p.threads(o.threads);
  p.parse(argc, argv);
  return ls::cli::run("distributed", [&] { return run(p, o); });
}
