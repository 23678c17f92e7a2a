// examples/custom_dataset.cpp — a port of pytorch/examples'
// cpp/custom-dataset/custom-dataset.cpp to lockstep, written for lockstep's API:
// a dataset class of the user's own, over a folder of images listed in an info
// file, trained with an AlexNet-style nn::Sequential of layers and Functional
// steps, nll_loss and SGD (lr 0.001, momentum 0.5).
//
// The info file has one line per image, "path label split" (split: train or
// test), the path relative to --dataset:
//   airplanes/image_0316.ppm 0 train
//   airplanes/image_0511.ppm 0 test
// Differences from the original: the images are binary PPM (P6) or PGM (P5)
// files, read and resized (nearest neighbour) by the dataset itself instead of
// OpenCV; pixels are scaled to [0, 1] (the original feeds 0..255); the number
// of classes is read from the labels instead of fixed at 102; the image size
// and a divisor of the layer widths are options, so the network fits a small
// machine (`--image-size 224 --width-divisor 1` is the original AlexNet shape);
// the shuffle of the lists is seeded (the original seeds it from
// std::random_device); after each epoch a line "epoch E test_accuracy A
// cpu_seconds C seconds S" (the process CPU time of the epoch's training and
// test) and at the end "final test_accuracy A", for scripts
// (bench/compare_examples_more.sh).
//   build/bin/custom_dataset --dataset ./dataset --info info.txt
// On the shape images of tools/make_shape_images.py, as bench/compare_examples_more.sh
// trains it beside PyTorch (the default lr 0.001 stays at chance for many epochs there;
// at 0.05 the final accuracy is chaotic, docs/results/examples.md):
//   python3 tools/make_shape_images.py /tmp/shapes 480 100
//   build/bin/custom_dataset --dataset /tmp/shapes --info /tmp/shapes/info.txt --lr 0.01 --iterations 25
// Read before: examples/custom_dataset_net.h (the data set and the network), examples/mnist.cpp.
// Read next: examples/dcgan.cpp.
#include <lockstep.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <random>
#include <string>

#include "examples/custom_dataset_net.h"
#include "tools/cli.h"

namespace ls = lockstep;

namespace {

struct Options {
  int64_t image_size = 64;
  int64_t width_divisor = 4;
  int64_t train_batch_size = 8;
  int64_t test_batch_size = 200;
  int64_t iterations = 10;
  int64_t log_interval = 20;
  int64_t seed = 1;
  int64_t threads = 1;
  double lr = 0.001;
  std::string dataset_path = "./dataset";
  std::string info_file_path = "info.txt";
};

void train(ls::nn::Sequential& network, ls::data::DataLoader& loader, ls::optim::Optimizer& optimizer,
           int64_t epoch, int64_t data_size, const Options& o) {
  int64_t index = 0;
  network.train();
  double loss_sum = 0, correct = 0;
  for (auto& batch : loader) {
    auto data = batch.data;
    auto targets = batch.target.view({-1});
    auto output = network.forward(data);
    auto loss = ls::nll_loss(output, targets);
    LS_CHECK(!std::isnan(loss.item<float>()), "the loss is NaN at epoch ", epoch,
             "; lower --lr");
    auto acc = output.argmax(1).eq(targets).sum();
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    loss_sum += loss.item<double>() * static_cast<double>(data.size(0));
    correct += acc.item<double>();
    if (index++ % o.log_interval == 0) {
      const int64_t end = std::min(data_size, index * o.train_batch_size);
      std::printf("Train Epoch: %lld %lld/%lld\tLoss: %.4f\tAcc: %.4f\n", static_cast<long long>(epoch),
                  static_cast<long long>(end), static_cast<long long>(data_size),
                  loss_sum / static_cast<double>(end), correct / static_cast<double>(end));
      std::fflush(stdout);
    }
  }
}

// Prints the test loss and accuracy; returns the accuracy.
double test(ls::nn::Sequential& network, ls::data::DataLoader& loader, int64_t data_size) {
  network.eval();
  ls::NoGradGuard no_grad;
  double loss_sum = 0, correct = 0;
  for (const auto& batch : loader) {
    auto targets = batch.target.view({-1});
    auto output = network.forward(batch.data);
    loss_sum += ls::nll_loss(output, targets, ls::kSum).item<double>();
    correct += output.argmax(1).eq(targets).sum().item<double>();
  }
  std::printf("Test Loss: %.4f\tAcc: %.4f\n", loss_sum / static_cast<double>(data_size),
              correct / static_cast<double>(data_size));
  std::fflush(stdout);
  return correct / static_cast<double>(data_size);
}

int run(const Options& o) {
  ls::set_num_threads(static_cast<int>(o.threads));
  ls::manual_seed(static_cast<uint64_t>(o.seed));
  std::printf("Running on: CPU\n");

  // The info file's lists, each shuffled (the original shuffles them with an unseeded generator).
  auto data = examples::read_info(o.info_file_path);
  std::mt19937 generator(static_cast<uint32_t>(o.seed));
  std::shuffle(data.first.begin(), data.first.end(), generator);
  std::shuffle(data.second.begin(), data.second.end(), generator);
  const int64_t classes = examples::count_classes(data);

  auto train_set = examples::CustomDataset(data.first, o.dataset_path, o.image_size).map(ls::data::transforms::Stack<>());
  auto train_size = train_set.size();
  auto train_loader = ls::data::make_data_loader<ls::data::SequentialSampler>(std::move(train_set),
                                                                              o.train_batch_size);
  auto test_set = examples::CustomDataset(data.second, o.dataset_path, o.image_size).map(ls::data::transforms::Stack<>());
  auto test_size = test_set.size();
  auto test_loader = ls::data::make_data_loader<ls::data::SequentialSampler>(std::move(test_set),
                                                                             o.test_batch_size);
  std::printf("%lld training and %lld test images of %lld classes, %lld x %lld\n",
              static_cast<long long>(train_size), static_cast<long long>(test_size),
              static_cast<long long>(classes), static_cast<long long>(o.image_size),
              static_cast<long long>(o.image_size));

  auto network = examples::make_network(o.image_size, o.width_divisor, classes);
  ls::optim::SGD optimizer(network->parameters(), ls::optim::SGDOptions(o.lr).momentum(0.5));
  double accuracy = 0;
  for (int64_t i = 0; i < o.iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    train(*network, *train_loader, optimizer, i + 1, train_size, o);
    accuracy = test(*network, *test_loader, test_size);
    std::printf("epoch %lld test_accuracy %.4f cpu_seconds %.2f seconds %.2f\n", static_cast<long long>(i + 1),
                accuracy, static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::printf("final test_accuracy %.4f\n", accuracy);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ls::cli::Program p("custom_dataset",
                     "pytorch/examples' cpp/custom-dataset on lockstep: a dataset class of one's own over "
                     "a folder of PPM/PGM images listed in an info file, and an AlexNet-style network.");
  Options o;
  p.text("--dataset", o.dataset_path, "folder the info file's image paths are relative to");
  p.text("--info", o.info_file_path, "info file: one line 'path label train|test' per image");
  p.integer("--image-size", o.image_size, "images are resized to S x S (AlexNet's layers need 64 or more)", 64, 4096);
  p.integer("--width-divisor", o.width_divisor, "divides every layer width (1: AlexNet's)", 1, 64);
  p.integer("--iterations", o.iterations, "epochs to train", 1, 100000);
  p.integer("--batch", o.train_batch_size, "training batch size", 1, 1000000);
  p.integer("--test-batch", o.test_batch_size, "test batch size", 1, 1000000);
  p.integer("--log-interval", o.log_interval, "print the running loss every N batches", 1);
  p.integer("--seed", o.seed, "seed of the weights, the dropout masks and the shuffled lists", 0);
  p.real("--lr", o.lr, "SGD learning rate (momentum 0.5)", 0.0, 1000.0, /*above_lo=*/true);
  p.threads(o.threads);
  p.parse(argc, argv);
  return ls::cli::run("custom_dataset", [&] { return run(o); });
}
