// examples/mnist.cpp — a port of pytorch/examples' cpp/mnist/mnist.cpp (the
// libtorch MNIST example) to lockstep, written for lockstep's API: the same
// network, data pipeline, optimizer and printout, line by line where libtorch
// and lockstep spell things alike (docs/api.md, "Coming from libtorch", maps
// the rest).
//
// The network: conv 1->10 (5x5), max-pool 2, ReLU; conv 10->20 (5x5),
// Dropout2d, max-pool 2, ReLU; fc 320->50, ReLU, dropout 0.5; fc 50->10;
// log_softmax, trained with nll_loss and SGD (lr 0.01, momentum 0.5), batch 64,
// tested with batch 1000 after every epoch. The data: datasets::MNIST mapped
// through Normalize(0.1307, 0.3081) and Stack, read from any directory in the
// MNIST layout (data/mnist.h) — MNIST itself, or Fashion-MNIST, which the
// Debian package dataset-fashion-mnist installs (the default --root):
//   build/bin/mnist --epochs 10
//   build/bin/mnist --root ./data/MNIST/raw
// Differences from the original: the paths and constants are options
// (`mnist --help`); each epoch also prints a line "epoch E test_accuracy A
// cpu_seconds C seconds S" and the run ends with a "final" line, for scripts
// (bench/compare_examples.sh).
// Read before: docs/api.md, data/mnist.h, examples/mnist_net.h.
// Read next: examples/custom_dataset.cpp.
#include <lockstep.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <string>

#include "examples/mnist_net.h"
#include "tools/cli.h"

namespace ls = lockstep;

namespace {

struct Options {
  std::string root = ls::data::FashionMNIST::kDefaultRoot;
  int64_t train_batch_size = 64;
  int64_t test_batch_size = 1000;
  int64_t epochs = 10;
  int64_t log_interval = 10;
  int64_t seed = 1;
  int64_t threads = 1;
  double lr = 0.01;
  double momentum = 0.5;
};

using Net = examples::MnistNet;  // the network, in examples/mnist_net.h

void train(int64_t epoch, Net& model, ls::Device device, ls::data::DataLoader& data_loader,
           ls::optim::Optimizer& optimizer, int64_t dataset_size, const Options& o) {
  model.train();
  int64_t batch_idx = 0;
  for (auto& batch : data_loader) {
    auto data = batch.data.to(device), targets = batch.target.to(device);
    optimizer.zero_grad();
    auto output = model.forward(data);
    auto loss = ls::nll_loss(output, targets);
    LS_CHECK(!std::isnan(loss.item<float>()), "the loss is NaN at epoch ", epoch,
             " batch ", batch_idx, "; lower --lr");
    loss.backward();
    optimizer.step();

    if (batch_idx++ % o.log_interval == 0) {
      std::printf("Train Epoch: %lld [%5lld/%5lld] Loss: %.4f\n", static_cast<long long>(epoch),
                  static_cast<long long>(batch_idx * batch.data.size(0)),
                  static_cast<long long>(dataset_size), loss.item<float>());
      std::fflush(stdout);
    }
  }
}

// Returns the accuracy.
double test(Net& model, ls::Device device, ls::data::DataLoader& data_loader, int64_t dataset_size) {
  ls::NoGradGuard no_grad;
  model.eval();
  double test_loss = 0;
  int64_t correct = 0;
  for (const auto& batch : data_loader) {
    auto data = batch.data.to(device), targets = batch.target.to(device);
    auto output = model.forward(data);
    test_loss += ls::nll_loss(output, targets, ls::kSum).item<float>();
    auto pred = output.argmax(1);
    correct += pred.eq(targets).sum().item<int64_t>();
  }
  test_loss /= static_cast<double>(dataset_size);
  const double accuracy = static_cast<double>(correct) / static_cast<double>(dataset_size);
  std::printf("Test set: Average loss: %.4f | Accuracy: %.3f\n", test_loss, accuracy);
  std::fflush(stdout);
  return accuracy;
}

int run(const Options& o) {
  ls::set_num_threads(static_cast<int>(o.threads));
  ls::manual_seed(static_cast<uint64_t>(o.seed));

  ls::Device device = ls::Device::cpu();
  if (ls::cuda::is_available()) {
    std::printf("CUDA available! Training on GPU.\n");
    device = ls::Device::cuda(0);
  } else {
    std::printf("Training on CPU.\n");
  }

  auto model = std::make_shared<Net>();
  model->to(device);

  using ls::data::datasets::MNIST;
  auto train_dataset = MNIST(o.root)
                           .map(ls::data::transforms::Normalize<>(0.1307, 0.3081))
                           .map(ls::data::transforms::Stack<>());
  const int64_t train_dataset_size = train_dataset.size();
  auto train_loader = ls::data::make_data_loader<ls::data::SequentialSampler>(
      std::move(train_dataset), o.train_batch_size);

  auto test_dataset = MNIST(o.root, MNIST::Mode::kTest)
                          .map(ls::data::transforms::Normalize<>(0.1307, 0.3081))
                          .map(ls::data::transforms::Stack<>());
  const int64_t test_dataset_size = test_dataset.size();
  auto test_loader = ls::data::make_data_loader(std::move(test_dataset), o.test_batch_size);

  ls::optim::SGD optimizer(model->parameters(), ls::optim::SGDOptions(o.lr).momentum(o.momentum));

  double accuracy = 0;
  for (int64_t epoch = 1; epoch <= o.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    train(epoch, *model, device, *train_loader, optimizer, train_dataset_size, o);
    accuracy = test(*model, device, *test_loader, test_dataset_size);
    std::printf("epoch %lld test_accuracy %.4f cpu_seconds %.2f seconds %.2f\n", static_cast<long long>(epoch),
                accuracy, static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::printf("final test_accuracy %.4f\n", accuracy);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ls::cli::Program p("mnist", "pytorch/examples' cpp/mnist on lockstep: the small CNN of the libtorch "
                              "MNIST example, trained on MNIST or Fashion-MNIST IDX files.");
  Options o;
  p.text("--root", o.root, "directory in the MNIST layout (data/mnist.h): MNIST or Fashion-MNIST");
  p.integer("--epochs", o.epochs, "epochs to train", 1, 100000);
  p.integer("--batch", o.train_batch_size, "training batch size", 1, 1000000);
  p.integer("--test-batch", o.test_batch_size, "test batch size", 1, 1000000);
  p.integer("--log-interval", o.log_interval, "print the loss every N batches", 1);
  p.integer("--seed", o.seed, "seed of the weights and the dropout masks", 0);
  p.real("--lr", o.lr, "SGD learning rate", 0.0, 1000.0, /*above_lo=*/true);
  p.real("--momentum", o.momentum, "SGD momentum", 0.0, 1.0);
  p.threads(o.threads);
  p.parse(argc, argv);
  return ls::cli::run("mnist", [&] { return run(o); });
}
