// bench/bench_custom_dataset_replay.cpp — trains the custom_dataset port's network
// (examples/custom_dataset_net.h) from PyTorch's initial weights, on PyTorch's order of the
// images and with PyTorch's dropout masks, all recorded by bench/torch/custom_dataset_replay.py,
// so that the two frameworks run the same training and differ only by floating-point rounding.
//
//   "$TORCH_PY" bench/torch/custom_dataset_replay.py 1 /tmp/r1 --dataset D --info D/info.txt
//   build/bin/bench_custom_dataset_replay --dir /tmp/r1 --dataset D [--epochs 1] [--lr 0.05]
//
// Prints, like the Python script: "step S loss L input_sum X" for every training step,
// "grad S NAME NORM" for every parameter at steps 1, 2, 10, 50 and 100, and
// "epoch E test_accuracy A". The loop is examples/custom_dataset.cpp's (nll_loss, SGD with
// momentum 0.5, batch 8, the lists in order); the data set and network are the example's own.
// Compared by bench/compare_custom_dataset_replay.sh.
//
// Read before: examples/custom_dataset.cpp, bench/bench_fashion_mnist_replay.cpp.
// Read next: bench/compare_custom_dataset_replay.sh.
#include <lockstep.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "examples/custom_dataset_net.h"
#include "tools/cli.h"

namespace ls = lockstep;

namespace {

// Dropout whose masks are read, in forward order, from masks.bin (uint8 0/1 per element).
struct RecordedDropout : ls::nn::UnaryModule {
  RecordedDropout(std::shared_ptr<std::ifstream> masks, double p) : masks(std::move(masks)), p(p) {}
  std::string type_name() const override { return "RecordedDropout"; }
  LS_NOT_A_HOLDER(RecordedDropout)

  // input (N, F) -> input * mask / (1 - p), mask the next N * F recorded bytes.
  ls::Tensor forward(const ls::Tensor& input) override {
    if (!is_training()) return input;
    std::vector<uint8_t> bytes(static_cast<size_t>(input.numel()));
    masks->read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    LS_CHECK(masks->gcount() == static_cast<std::streamsize>(bytes.size()),
             "bench_custom_dataset_replay: masks.bin ends early; record as many epochs as you replay");
    ls::Tensor mask = ls::empty(input.sizes());
    float* out = mask.data_ptr<float>();
    for (size_t i = 0; i < bytes.size(); ++i) out[i] = static_cast<float>(bytes[i]) / static_cast<float>(1.0 - p);
    return input * mask;
  }

  std::shared_ptr<std::ifstream> masks;
  double p;
};

// The network with each Dropout child replaced by a RecordedDropout (the same parameters).
std::shared_ptr<ls::nn::Sequential> with_recorded_dropout(const ls::nn::Sequential& network,
                                                          const std::shared_ptr<std::ifstream>& masks) {
  auto replay = std::make_shared<ls::nn::Sequential>();
  const auto children = network.named_children();
  for (size_t i = 0; i < network.size(); ++i) {
    if (auto dropout = std::dynamic_pointer_cast<ls::nn::Dropout>(network[i])) {
      replay->push_back(children[i].key(), std::make_shared<RecordedDropout>(masks, dropout->p));
    } else {
      replay->push_back(children[i].key(), network[i]);
    }
  }
  return replay;
}

// The Euclidean norm of a float32 tensor, summed in double.
double norm_in_double(const ls::Tensor& t) {
  const ls::Tensor c = t.contiguous();
  const float* p = c.data_ptr<float>();
  double sum = 0;
  for (int64_t i = 0; i < c.numel(); ++i) sum += static_cast<double>(p[i]) * p[i];
  return std::sqrt(sum);
}

// The sum of a float32 tensor's elements, in double.
double sum_in_double(const ls::Tensor& t) {
  const ls::Tensor c = t.contiguous();
  const float* p = c.data_ptr<float>();
  double s = 0;
  for (int64_t i = 0; i < c.numel(); ++i) s += p[i];
  return s;
}

int run_main(int argc, char** argv) {
  std::string dir, dataset;
  int64_t epochs = 1, threads = 1, batch = 8, test_batch = 200, image_size = 64, divisor = 4;
  double lr = 0.05;
  ls::cli::Program p("bench_custom_dataset_replay",
                     "Trains the custom_dataset port from PyTorch's recorded start, order and dropout masks "
                     "(bench/torch/custom_dataset_replay.py).");
  p.text("--dir", dir, "the directory the Python script wrote (init.safetensors, order.txt, masks.bin)")->required();
  p.text("--dataset", dataset, "folder the image paths are relative to")->required();
  p.integer("--epochs", epochs, "epochs (at most the recorded ones)", 1, 1000);
  p.integer("--batch", batch, "training batch size", 1, 1000000);
  p.integer("--test-batch", test_batch, "test batch size", 1, 1000000);
  p.integer("--image-size", image_size, "images are resized to S x S", 64, 4096);
  p.integer("--width-divisor", divisor, "divides every layer width", 1, 64);
  p.real("--lr", lr, "SGD learning rate (momentum 0.5)", 0.0, 1000.0, /*above_lo=*/true);
  p.threads(threads);
  p.parse(argc, argv);
  ls::set_num_threads(static_cast<int>(threads));

  const auto data = examples::read_info(dir + "/order.txt");  // PyTorch's order
  auto network = examples::make_network(image_size, divisor, examples::count_classes(data));
  ls::nn::load(*network, dir + "/init.safetensors");
  auto masks = std::make_shared<std::ifstream>(dir + "/masks.bin", std::ios::binary);
  LS_CHECK(masks->is_open(), "bench_custom_dataset_replay: cannot open ", dir, "/masks.bin");
  auto replay = with_recorded_dropout(*network, masks);
  const auto names = network->named_parameters();

  auto train_loader = ls::data::make_data_loader<ls::data::SequentialSampler>(
      examples::CustomDataset(data.first, dataset, image_size).map(ls::data::transforms::Stack<>()), batch);
  auto test_loader = ls::data::make_data_loader<ls::data::SequentialSampler>(
      examples::CustomDataset(data.second, dataset, image_size).map(ls::data::transforms::Stack<>()), test_batch);
  ls::optim::SGD optimizer(network->parameters(), ls::optim::SGDOptions(lr).momentum(0.5));
  const std::set<int64_t> grad_steps = {1, 2, 10, 50, 100};
  int64_t step = 0;
  for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
    replay->train();
    for (auto& batch_data : *train_loader) {
      ++step;
      auto targets = batch_data.target.view({-1});
      auto loss = ls::nll_loss(replay->forward(batch_data.data), targets);
      optimizer.zero_grad();
      loss.backward();
      if (grad_steps.count(step)) {
        for (const auto& item : names) {
          std::printf("grad %lld %s %.9g\n", static_cast<long long>(step), item.key().c_str(),
                      norm_in_double(item.value().grad()));
        }
      }
      optimizer.step();
      std::printf("step %lld loss %.9g input_sum %.9g\n", static_cast<long long>(step), loss.item<double>(),
                  sum_in_double(batch_data.data));
    }
    replay->eval();
    ls::NoGradGuard no_grad;
    double correct = 0;
    for (const auto& batch_data : *test_loader) {
      correct += replay->forward(batch_data.data).argmax(1).eq(batch_data.target.view({-1})).sum().item<double>();
    }
    std::printf("epoch %lld test_accuracy %.4f\n", static_cast<long long>(epoch),
                correct / static_cast<double>(data.second.size()));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ls::cli::run("bench_custom_dataset_replay", [&] { return run_main(argc, argv); });
}
