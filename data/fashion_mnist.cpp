// data/fashion_mnist.cpp — Fashion-MNIST: the MNIST layout's reader
// (data/mnist.cpp) with Fashion-MNIST's name and install hint in its errors.
// Read before: data/fashion_mnist.h, data/mnist.cpp. Read next: data/synthetic.cpp.
#include "data/fashion_mnist.h"

namespace lockstep::data {

namespace {
constexpr MnistLayout kFashionMnist{
    "FashionMNIST",
    "install it with `apt-get install dataset-fashion-mnist` (it goes to "
    "/usr/share/datasets/fashion-mnist) or pass the directory that holds the IDX files"};
}  // namespace

Example read_fashion_mnist(const std::string& root, bool train) {
  return read_mnist_split(root, train, kFashionMnist);
}

FashionMNIST::FashionMNIST(const std::string& root, bool train)
    : FashionMNIST(read_fashion_mnist(root, train), train) {}

FashionMNIST::FashionMNIST(Example loaded, bool train)
    : datasets::Dataset<FashionMNIST, TensorDataset>(std::move(loaded.data),
                                                      std::move(loaded.target)),
      train_(train) {}

const std::array<const char*, 10>& FashionMNIST::class_names() {
  static const std::array<const char*, 10> names = {"T-shirt/top", "Trouser", "Pullover",
                                                     "Dress",       "Coat",    "Sandal",
                                                     "Shirt",       "Sneaker", "Bag",
                                                     "Ankle boot"};
  return names;
}

}  // namespace lockstep::data
