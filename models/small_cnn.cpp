// models/small_cnn.cpp — SmallCNN and MLP.
// Read before: models/small_cnn.h.
#include "models/small_cnn.h"

#include "core/nn_ops.h"

namespace lockstep::models {

SmallCNN::SmallCNN() {
  conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 32, 3).padding(1)));
  conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(32, 64, 3).padding(1)));
  fc1 = register_module("fc1", std::make_shared<nn::Linear>(64 * 7 * 7, 128));
  fc2 = register_module("fc2", std::make_shared<nn::Linear>(128, 10));
}

Tensor SmallCNN::forward(const Tensor& x) {
  Tensor h = max_pool2d(conv1->forward(x).relu(), {2, 2}, {2, 2});  // (N, 32, 14, 14)
  h = max_pool2d(conv2->forward(h).relu(), {2, 2}, {2, 2});         // (N, 64, 7, 7)
  return fc2->forward(fc1->forward(h.flatten(1)).relu());           // (N, 10)
}

MLP::MLP(const std::vector<int64_t>& sizes) {
  LS_CHECK(sizes.size() >= 2, "MLP: needs at least an input and an output size");
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    layers.push_back(register_module("fc" + std::to_string(i),
                                     std::make_shared<nn::Linear>(sizes[i], sizes[i + 1])));
  }
}

Tensor MLP::forward(const Tensor& x) {
  Tensor h = x.flatten(1);  // (N, sizes[0])
  for (size_t i = 0; i < layers.size(); ++i) {
    h = layers[i]->forward(h);
    if (i + 1 < layers.size()) h = h.relu();
  }
  return h;
}

}  // namespace lockstep::models
