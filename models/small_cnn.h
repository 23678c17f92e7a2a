// models/small_cnn.h — the small Fashion-MNIST CNN and an MLP.
//
// SmallCNN is exactly the network of bench/torch/models.py's SmallCNN:
// conv(1->32, 3x3, pad 1)-ReLU-maxpool2 - conv(32->64, 3x3, pad 1)-ReLU-maxpool2 -
// fc(64*7*7 -> 128)-ReLU - fc(128 -> 10). Input (N, 1, 28, 28) -> logits (N, 10).
// Read before: nn/conv.h, nn/linear.h. Read next: examples/train_fashion_mnist.cpp.
#pragma once

#include <memory>
#include <vector>

#include "nn/nn.h"

namespace lockstep::models {

struct SmallCNN : nn::UnaryModule {
  SmallCNN();
  std::string type_name() const override { return "SmallCNN"; }
  Tensor forward(const Tensor& x) override;  // (N, 1, 28, 28) -> (N, 10)
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

// Fully connected layers with ReLU between them: sizes {784, 128, 10} gives
// fc0 (784->128), ReLU, fc1 (128->10). Input (N, *) is flattened to (N, sizes[0]).
struct MLP : nn::UnaryModule {
  explicit MLP(const std::vector<int64_t>& sizes);
  std::string type_name() const override { return "MLP"; }
  Tensor forward(const Tensor& x) override;
  std::vector<std::shared_ptr<nn::Linear>> layers;
};

}  // namespace lockstep::models
