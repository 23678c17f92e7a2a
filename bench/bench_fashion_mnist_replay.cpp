// bench/bench_fashion_mnist_replay.cpp — trains lockstep's Fashion-MNIST CNN from PyTorch's
// initial weights and on PyTorch's batch order, both recorded by
// bench/torch/fashion_mnist_replay.py, so that lockstep and PyTorch can be compared with the
// random draws taken out: the only remaining difference is floating-point rounding.
//
//   "$(bench/torch/venv.sh | head -n1)" bench/torch/fashion_mnist_replay.py 0 /tmp/replay0   # PyTorch's run + files
//   build/bin/bench_fashion_mnist_replay --dir /tmp/replay0 [--epochs 4] [--threads 1]
//
// Prints "step S loss L" at the same steps as the Python script in epoch 1 and one
// "epoch E train_loss L test_accuracy A seconds S" line per epoch, like the reference.
// Hyper-parameters are the reference's (SGD lr 0.05 momentum 0.9, batch 64).
//
// Read before: examples/train_fashion_mnist.cpp. Read next: bench/compare_fashion_mnist_replay.sh.
#include <lockstep.h>

#include "tools/cli.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace ls = lockstep;

namespace {

// Visits each epoch's indices in the order PyTorch's torch.randperm gave them
// (order.bin: epochs x n int64, little-endian, as the Python script writes it).
class RecordedOrderSampler : public ls::data::Sampler {
 public:
  RecordedOrderSampler(const std::string& path, int64_t n, int64_t epochs) : n_(n) {
    std::ifstream in(path, std::ios::binary);
    LS_CHECK(in.good(), "bench_fashion_mnist_replay: cannot open ", path,
             "; write it with bench/torch/fashion_mnist_replay.py");
    order_.resize(static_cast<size_t>(n * epochs));
    in.read(reinterpret_cast<char*>(order_.data()), static_cast<std::streamsize>(order_.size() * 8));
    LS_CHECK(in.gcount() == static_cast<std::streamsize>(order_.size() * 8), "bench_fashion_mnist_replay: ",
             path, " holds fewer than ", epochs, " epochs of ", n, " indices; rerun the Python script with --epochs ",
             epochs);
    for (int64_t i : order_) LS_CHECK(i >= 0 && i < n, "bench_fashion_mnist_replay: index ", i, " in ", path,
                                      " is outside [0, ", n, ")");
  }
  std::vector<int64_t> indices() const override {
    auto first = order_.begin() + epoch_ * n_;
    return {first, first + n_};
  }
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
  std::vector<int64_t> order_;
};

double evaluate(ls::models::SmallCNN& model, const ls::data::FashionMNIST& test) {
  ls::NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0;
  ls::data::DataLoader loader(test, ls::data::DataLoaderOptions(1000).workers(1));
  for (const auto& batch : loader) correct += model.forward(batch.data).argmax(1).eq(batch.target).sum().item<int64_t>();
  model.train();
  return static_cast<double>(correct) / static_cast<double>(test.size());
}

}  // namespace

int run_main(int argc, char** argv) {
  std::string dir, root = "/usr/share/datasets/fashion-mnist";
  int64_t epochs = 4, threads = 1, batch = 64;
  ls::cli::Program p("bench_fashion_mnist_replay", "Trains the Fashion-MNIST CNN from PyTorch's initial weights "
                                                   "on PyTorch's batch order (bench/torch_fashion_mnist_replay.py).");
  p.text("--dir", dir, "the directory the Python script wrote (init.safetensors, order.bin)")->required();
  p.integer("--epochs", epochs, "epochs (at most the recorded ones)", 1, 1000);
  p.threads(threads);
  p.text("--root", root, "Fashion-MNIST directory");
  p.parse(argc, argv);
  try {
    ls::set_num_threads(static_cast<int>(threads));
    ls::data::FashionMNIST train(root, /*train=*/true);
    ls::data::FashionMNIST test(root, /*train=*/false);
    auto model = std::make_shared<ls::models::SmallCNN>();
    ls::nn::load(*model, dir + "/init.safetensors");
    ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.05).momentum(0.9));
    RecordedOrderSampler sampler(dir + "/order.bin", train.size(), epochs);
    ls::data::DataLoader loader(train, ls::data::DataLoaderOptions(batch).workers(1), sampler);
    const std::set<int64_t> log_steps = {1, 2, 5, 10, 20, 50, 100, 200, 500, 937};
    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      sampler.set_epoch(epoch);
      auto t0 = std::chrono::steady_clock::now();
      double loss_sum = 0;
      int64_t seen = 0, step = 0;
      for (const auto& b : loader) {
        opt.zero_grad();
        ls::Tensor loss = ls::nn::functional::cross_entropy(model->forward(b.data), b.target);
        loss.backward();
        opt.step();
        loss_sum += loss.item<double>() * static_cast<double>(b.data.size(0));
        seen += b.data.size(0);
        if (epoch == 0 && log_steps.count(++step)) std::printf("step %lld loss %.6f\n", static_cast<long long>(step), loss.item<double>());
      }
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("epoch %lld train_loss %.4f test_accuracy %.4f seconds %.1f\n", static_cast<long long>(epoch + 1),
                  loss_sum / static_cast<double>(seen), evaluate(*model, test), secs);
      std::fflush(stdout);
    }
  } catch (const ls::Error& e) {
    std::fprintf(stderr, "bench_fashion_mnist_replay: %s\n", e.what());
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  return lockstep::cli::run("bench_fashion_mnist_replay", [&] { return run_main(argc, argv); });
}
