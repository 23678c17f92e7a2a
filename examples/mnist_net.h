// examples/mnist_net.h — the network of pytorch/examples' cpp/mnist and
// cpp/distributed, written with lockstep's modules (examples/mnist.cpp,
// examples/distributed.cpp):
//   conv 1->10 (5x5), max-pool 2, ReLU; conv 10->20 (5x5), Dropout2d,
//   max-pool 2, ReLU; fc 320->50, ReLU, dropout 0.5; fc 50->10; log_softmax.
// Input (N, 1, 28, 28) -> log-probabilities (N, 10), for nll_loss.
// Read before: nn/conv.h, nn/dropout.h. Read next: examples/mnist.cpp.
#pragma once

#include <lockstep.h>

#include <memory>

namespace examples {

struct MnistNet : lockstep::nn::Module {
  MnistNet() {
    namespace nn = lockstep::nn;
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 10, /*kernel_size=*/5)));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(10, 20, /*kernel_size=*/5)));
    conv2_drop = register_module("conv2_drop", std::make_shared<nn::Dropout2d>());
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(320, 50));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(50, 10));
  }

  lockstep::Tensor forward(lockstep::Tensor x) {
    namespace ls = lockstep;
    x = ls::relu(ls::max_pool2d(conv1->forward(x), 2));                        // (N, 10, 12, 12)
    x = ls::relu(ls::max_pool2d(conv2_drop->forward(conv2->forward(x)), 2));  // (N, 20, 4, 4)
    x = x.view({-1, 320});
    x = ls::relu(fc1->forward(x));
    x = ls::dropout(x, /*p=*/0.5, /*training=*/is_training());
    x = fc2->forward(x);
    return ls::log_softmax(x, /*dim=*/1);
  }

  std::shared_ptr<lockstep::nn::Conv2d> conv1, conv2;
  std::shared_ptr<lockstep::nn::Dropout2d> conv2_drop;
  std::shared_ptr<lockstep::nn::Linear> fc1, fc2;
};

}  // namespace examples
