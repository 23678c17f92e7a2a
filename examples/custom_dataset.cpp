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
// Read before: data/map_dataset.h, examples/mnist.cpp. Read next: examples/dcgan.cpp.
#include <lockstep.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

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

using Data = std::vector<std::pair<std::string, int64_t>>;

// A binary PPM (P6) or PGM (P5) file with maxval 255 as (3, height, width) uint8.
ls::Tensor read_netpbm(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LS_CHECK(in.is_open(), "cannot open image '", path, "'");
  std::string magic;
  int64_t width = 0, height = 0, maxval = 0;
  in >> magic >> width >> height >> maxval;
  LS_CHECK(in && (magic == "P6" || magic == "P5") && width > 0 && height > 0 && maxval == 255,
           "'", path, "' is not a binary PPM (P6) or PGM (P5) image with maxval 255");
  in.get();  // the single whitespace byte after maxval
  const int64_t channels = magic == "P6" ? 3 : 1;
  std::vector<uint8_t> pixels(static_cast<size_t>(width * height * channels));
  in.read(reinterpret_cast<char*>(pixels.data()), static_cast<std::streamsize>(pixels.size()));
  LS_CHECK(in.gcount() == static_cast<std::streamsize>(pixels.size()), "'", path,
           "' is truncated: ", in.gcount(), " of ", pixels.size(), " pixel bytes");
  // Interleaved (h, w, c) bytes -> planes (3, h, w); grey is repeated into all three.
  ls::Tensor image = ls::empty({3, height, width}, ls::TensorOptions().dtype(ls::kUInt8));
  uint8_t* out = image.data_ptr<uint8_t>();
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t i = 0; i < height * width; ++i) {
      out[c * height * width + i] = pixels[static_cast<size_t>(i * channels + (channels == 3 ? c : 0))];
    }
  }
  return image;
}

// image (3, h, w) uint8 -> (3, size, size) float32 in [0, 1], nearest neighbour.
ls::Tensor resize_to_float(const ls::Tensor& image, int64_t size) {
  const int64_t h = image.size(1), w = image.size(2);
  ls::Tensor out = ls::empty({3, size, size});
  const uint8_t* src = image.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t y = 0; y < size; ++y) {
      const int64_t sy = y * h / size;
      for (int64_t x = 0; x < size; ++x) {
        dst[(c * size + y) * size + x] = static_cast<float>(src[(c * h + sy) * w + x * w / size]) / 255.0f;
      }
    }
  }
  return out;
}

class CustomDataset : public ls::data::datasets::Dataset<CustomDataset> {
 public:
  CustomDataset(Data data, std::string root, int64_t image_size)
      : data_(std::move(data)), root_(std::move(root)), image_size_(image_size) {}

  ls::data::Example get(int64_t index) const override {
    const std::string path = (std::filesystem::path(root_) / data_[static_cast<size_t>(index)].first).string();
    ls::Tensor tdata = resize_to_float(read_netpbm(path), image_size_);  // (3, S, S)
    ls::Tensor tlabel = ls::scalar_tensor(static_cast<double>(data_[static_cast<size_t>(index)].second),
                                          ls::TensorOptions().dtype(ls::kInt64));
    return {tdata, tlabel};
  }

  int64_t size() const override { return static_cast<int64_t>(data_.size()); }

 private:
  Data data_;
  std::string root_;
  int64_t image_size_;
};

// The info file's train and test lists, each shuffled.
std::pair<Data, Data> read_info(const Options& o) {
  std::ifstream stream(o.info_file_path);
  LS_CHECK(stream.is_open(), "cannot open the info file '", o.info_file_path,
           "' (--info; one line per image: path label train|test)");
  Data train, test;
  std::string line;
  for (int64_t number = 1; std::getline(stream, line); ++number) {
    std::istringstream fields(line);
    std::string path, type;
    int64_t label = -1;
    if (!(fields >> path)) continue;  // a blank line
    fields >> label >> type;
    LS_CHECK(fields && label >= 0 && (type == "train" || type == "test"),
             o.info_file_path, ":", number, ": expected 'path label train|test' with a label >= 0, got '",
             line, "'");
    (type == "train" ? train : test).emplace_back(path, label);
  }
  LS_CHECK(!train.empty() && !test.empty(), o.info_file_path, " lists ",
           train.size(), " training and ", test.size(), " test images; both splits need some");
  std::mt19937 generator(static_cast<uint32_t>(o.seed));
  std::shuffle(train.begin(), train.end(), generator);
  std::shuffle(test.begin(), test.end(), generator);
  return {train, test};
}

// AlexNet's layers; widths divided by `div`. Input (N, 3, S, S) -> log-probabilities (N, classes).
std::shared_ptr<ls::nn::Sequential> make_network(int64_t image_size, int64_t div, int64_t classes) {
  using namespace ls::nn;
  auto relu = [] { return std::make_shared<Functional>(ls::relu); };
  auto pool = [] {
    return std::make_shared<Functional>([](const ls::Tensor& x) { return ls::max_pool2d(x, 3, /*stride=*/2); });
  };
  auto features = std::make_shared<Sequential>(
      std::make_shared<Conv2d>(Conv2dOptions(3, 64 / div, 11).stride(4).padding(2)), relu(), pool(),
      std::make_shared<Conv2d>(Conv2dOptions(64 / div, 192 / div, 5).padding(2)), relu(), pool(),
      std::make_shared<Conv2d>(Conv2dOptions(192 / div, 384 / div, 3).padding(1)), relu(),
      std::make_shared<Conv2d>(Conv2dOptions(384 / div, 256 / div, 3).padding(1)), relu(),
      std::make_shared<Conv2d>(Conv2dOptions(256 / div, 256 / div, 3).padding(1)), relu(), pool());
  // The flattened feature size (256 * 6 * 6 at 224 x 224), from one forward of zeros.
  int64_t flat = 0;
  {
    ls::NoGradGuard no_grad;
    flat = features->forward(ls::zeros({1, 3, image_size, image_size})).numel();
  }
  auto network = std::make_shared<Sequential>();
  network->push_back("features", features);
  network->push_back(std::make_shared<Functional>([flat](const ls::Tensor& x) { return x.reshape({-1, flat}); }));
  network->push_back(std::make_shared<Dropout>());
  network->push_back(std::make_shared<Linear>(flat, 4096 / div));
  network->push_back(relu());
  network->push_back(std::make_shared<Dropout>());
  network->push_back(std::make_shared<Linear>(4096 / div, 4096 / div));
  network->push_back(relu());
  network->push_back(std::make_shared<Linear>(4096 / div, classes));
  network->push_back(std::make_shared<Functional>([](const ls::Tensor& x) { return ls::log_softmax(x, 1); }));
  return network;
}

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

  const auto data = read_info(o);
  int64_t classes = 0;
  for (const auto* list : {&data.first, &data.second}) {
    for (const auto& [path, label] : *list) classes = std::max(classes, label + 1);
  }

  auto train_set = CustomDataset(data.first, o.dataset_path, o.image_size).map(ls::data::transforms::Stack<>());
  auto train_size = train_set.size();
  auto train_loader = ls::data::make_data_loader<ls::data::SequentialSampler>(std::move(train_set),
                                                                              o.train_batch_size);
  auto test_set = CustomDataset(data.second, o.dataset_path, o.image_size).map(ls::data::transforms::Stack<>());
  auto test_size = test_set.size();
  auto test_loader = ls::data::make_data_loader<ls::data::SequentialSampler>(std::move(test_set),
                                                                             o.test_batch_size);
  std::printf("%lld training and %lld test images of %lld classes, %lld x %lld\n",
              static_cast<long long>(train_size), static_cast<long long>(test_size),
              static_cast<long long>(classes), static_cast<long long>(o.image_size),
              static_cast<long long>(o.image_size));

  auto network = make_network(o.image_size, o.width_divisor, classes);
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
