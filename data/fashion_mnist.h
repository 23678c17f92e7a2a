// data/fashion_mnist.h — the Fashion-MNIST dataset (Zalando; 28x28 grey images
// of clothes in 10 classes: 60000 for training, 10000 for testing).
//
// FashionMNIST(root, train) reads the four IDX files (see data/idx.h) that the
// Debian package `dataset-fashion-mnist` installs under
// /usr/share/datasets/fashion-mnist:
//   train-images-idx3-ubyte.gz  train-labels-idx1-ubyte.gz
//   t10k-images-idx3-ubyte.gz   t10k-labels-idx1-ubyte.gz
// The same names without .gz (already decompressed) work too. The whole split
// is held in memory as one float32 tensor (N, 1, 28, 28) with values in [0, 1]
// (pixel / 255, no mean/std normalisation) and one int64 tensor (N) of labels
// in [0, 9]; as a TensorDataset it hands out batches with one index_select.
// The files are in the MNIST layout and read by data/mnist.h's reader, and
// `.map(transform)` works as on datasets::MNIST (data/map_dataset.h).
// Read before: data/mnist.h. Read next: data/synthetic.h.
#pragma once

#include <array>
#include <string>

#include "data/mnist.h"

namespace lockstep::data {

class FashionMNIST : public datasets::Dataset<FashionMNIST, TensorDataset> {
 public:
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist";
  static constexpr int64_t kNumClasses = 10;
  static constexpr int64_t kImageSize = 28;

  explicit FashionMNIST(const std::string& root = kDefaultRoot, bool train = true);

  bool is_train() const { return train_; }
  const Tensor& images() const { return data(); }    // (N, 1, 28, 28) float32 in [0, 1]
  const Tensor& labels() const { return targets(); }  // (N) int64 in [0, 9]

  // The class names, by label.
  static const std::array<const char*, 10>& class_names();

 private:
  FashionMNIST(Example loaded, bool train);
  bool train_;
};

// Reads one split without building the dataset: {images (N, 1, 28, 28) float32,
// labels (N) int64}. FashionMNIST's constructor calls it.
Example read_fashion_mnist(const std::string& root, bool train);

}  // namespace lockstep::data
