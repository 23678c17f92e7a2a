// tests/install/consumer/train_loops.cpp — the MLP and CNN training loops a
// newcomer writes from docs/api.md, built against the *installed* package.
//
// It uses only spellings from docs/api.md: a Module subclass with register_module
// (the MLP of the nn section), a Sequential CNN (Conv2d, ReLU, MaxPool2d,
// Flatten, Linear), FashionMNIST + DistributedSampler + DataLoader, SGD with
// momentum, cross_entropy, save/load. Each model trains on 2,048 training
// images for 2 epochs and must then classify a held-out set of 1,000 test
// images far above chance (10%), and a reloaded checkpoint must give the same
// outputs. Exits non-zero (with a message) when any of that fails.
//
// Read before: main.cpp (core + autograd). Driven by tests/install/run_install_check.cmake.
#include <lockstep.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

namespace ls = lockstep;

namespace {

// The MLP of docs/api.md's nn section.
struct Net : ls::nn::Module {
  std::shared_ptr<ls::nn::Linear> fc1, fc2;
  Net() {
    fc1 = register_module("fc1", std::make_shared<ls::nn::Linear>(784, 128));
    fc2 = register_module("fc2", std::make_shared<ls::nn::Linear>(128, 10));
  }
  ls::Tensor forward(const ls::Tensor& x) { return fc2->forward(fc1->forward(x).relu()); }
};

std::shared_ptr<ls::nn::Sequential> make_cnn() {
  auto cnn = std::make_shared<ls::nn::Sequential>();
  cnn->push_back("conv1", std::make_shared<ls::nn::Conv2d>(ls::nn::Conv2dOptions(1, 16, 3).padding(1)));
  cnn->push_back("relu1", std::make_shared<ls::nn::ReLU>());
  cnn->push_back("pool1", std::make_shared<ls::nn::MaxPool2d>(2, 2, 0));
  cnn->push_back("flatten", std::make_shared<ls::nn::Flatten>());
  cnn->push_back("fc", std::make_shared<ls::nn::Linear>(16 * 14 * 14, 10));
  return cnn;
}

// (N, 1, 28, 28) images -> what each model takes.
ls::Tensor as_mlp_input(const ls::Tensor& x) { return x.flatten(1); }
ls::Tensor as_cnn_input(const ls::Tensor& x) { return x; }

template <class Model>
double accuracy(Model& model, const ls::Tensor& images, const ls::Tensor& labels,
                ls::Tensor (*prepare)(const ls::Tensor&)) {
  ls::NoGradGuard no_grad;
  model.eval();
  ls::Tensor correct = model.forward(prepare(images)).argmax(1).eq(labels).sum();
  model.train();
  return static_cast<double>(correct.item<int64_t>()) / static_cast<double>(labels.size(0));
}

// Trains on the first 2,048 training images; returns held-out accuracy, or -1 on failure.
template <class Model>
double train(const char* name, std::shared_ptr<Model> model, ls::Tensor (*prepare)(const ls::Tensor&),
             const ls::data::FashionMNIST& train_set, const ls::Tensor& test_x, const ls::Tensor& test_y) {
  ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.05).momentum(0.9));
  ls::data::DistributedSampler sampler(2048, /*num_replicas=*/1, /*rank=*/0, /*shuffle=*/true,
                                       /*seed=*/0, /*drop_last=*/false);
  ls::data::DataLoader loader(train_set, ls::data::DataLoaderOptions(64).workers(1), sampler);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    sampler.set_epoch(epoch);
    double loss_sum = 0;
    int64_t steps = 0;
    for (const auto& batch : loader) {
      opt.zero_grad();
      ls::Tensor loss = ls::nn::functional::cross_entropy(model->forward(prepare(batch.data)), batch.target);
      loss.backward();
      opt.step();
      loss_sum += loss.item<double>();
      ++steps;
    }
    std::printf("%s epoch %lld mean loss %.4f\n", name, static_cast<long long>(epoch + 1),
                loss_sum / static_cast<double>(steps));
  }
  const double acc = accuracy(*model, test_x, test_y, prepare);
  std::printf("%s held-out accuracy %.3f\n", name, acc);

  // A checkpoint written and read back gives the same outputs.
  const std::string path = std::string("consumer_") + name + ".safetensors";
  ls::nn::save(*model, path);
  return acc;
}

template <class Model>
bool reload_matches(std::shared_ptr<Model> trained, std::shared_ptr<Model> fresh, const char* name,
                    const ls::Tensor& x) {
  const std::string path = std::string("consumer_") + name + ".safetensors";
  ls::nn::load(*fresh, path);
  std::filesystem::remove(path);
  ls::NoGradGuard no_grad;
  trained->eval();
  fresh->eval();
  return ls::allclose(trained->forward(x), fresh->forward(x), 0.0, 0.0);
}

}  // namespace

int main() {
  const std::string root = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(root)) {
    std::fprintf(stderr, "train_loops: %s is missing; apt-get install dataset-fashion-mnist\n", root.c_str());
    return 1;
  }
  try {
    ls::manual_seed(0);
    ls::set_num_threads(1);
    ls::data::FashionMNIST train_set(root, /*train=*/true);
    ls::data::FashionMNIST test_set(root, /*train=*/false);
    // The first 1,000 test images as one batch.
    ls::data::DataLoader test_loader(test_set, ls::data::DataLoaderOptions(1000).workers(1));
    ls::Tensor test_x, test_y;
    for (const auto& batch : test_loader) {
      test_x = batch.data;    // (1000, 1, 28, 28)
      test_y = batch.target;  // (1000)
      break;
    }

    auto mlp = std::make_shared<Net>();
    const double mlp_acc = train("mlp", mlp, as_mlp_input, train_set, test_x, test_y);
    auto cnn = make_cnn();
    const double cnn_acc = train("cnn", cnn, as_cnn_input, train_set, test_x, test_y);

    bool ok = true;
    // 2,048 images for 2 epochs reach about 75-80%; chance is 10%.
    if (mlp_acc < 0.65) { std::fprintf(stderr, "train_loops: MLP accuracy %.3f < 0.65\n", mlp_acc); ok = false; }
    if (cnn_acc < 0.65) { std::fprintf(stderr, "train_loops: CNN accuracy %.3f < 0.65\n", cnn_acc); ok = false; }
    if (!reload_matches(mlp, std::make_shared<Net>(), "mlp", as_mlp_input(test_x))) {
      std::fprintf(stderr, "train_loops: reloaded MLP gives different outputs\n");
      ok = false;
    }
    if (!reload_matches(cnn, make_cnn(), "cnn", test_x)) {
      std::fprintf(stderr, "train_loops: reloaded CNN gives different outputs\n");
      ok = false;
    }
    if (!ok) return 1;
    std::printf("train_loops: ok\n");
    return 0;
  } catch (const ls::Error& e) {
    std::fprintf(stderr, "train_loops: %s\n", e.what());
    return 1;
  }
}
