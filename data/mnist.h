// data/mnist.h — the MNIST dataset (LeCun et al.; 28x28 grey images of
// handwritten digits, 60000 for training and 10000 for testing) in libtorch's
// spelling, and the reader of the four-file MNIST layout that FashionMNIST
// shares:
//
//   auto train = ls::data::datasets::MNIST(root)          // Mode::kTrain
//                    .map(ls::data::transforms::Normalize<>(0.1307, 0.3081))
//                    .map(ls::data::transforms::Stack<>());
//   ls::data::datasets::MNIST test(root, ls::data::datasets::MNIST::Mode::kTest);
//
// A directory in the MNIST layout holds four IDX files (data/idx.h), plain or
// gzipped (name.gz is read when it exists, else name):
//   train-images-idx3-ubyte  train-labels-idx1-ubyte     (Mode::kTrain)
//   t10k-images-idx3-ubyte   t10k-labels-idx1-ubyte      (Mode::kTest)
// Fashion-MNIST uses the same names and format, so MNIST(root) reads the
// Debian package dataset-fashion-mnist's /usr/share/datasets/fashion-mnist
// too. As in libtorch, images() is float32 (N, 1, 28, 28), pixel / 255 in
// [0, 1], and targets() int64 (N); mean/std normalisation is the Normalize
// transform's job. Every file is checked (missing, truncated, wrong magic
// number, image and label counts that differ, a label outside 0..9), each with
// an ls::Error that names the file and what to do.
// Read before: data/idx.h, data/map_dataset.h. Read next: data/fashion_mnist.h.
#pragma once

#include <string>

#include "data/dataset.h"
#include "data/map_dataset.h"

namespace lockstep::data {

// What the errors of one MNIST-layout dataset say: its name ("MNIST",
// "FashionMNIST") and where to get the files.
struct MnistLayout {
  const char* dataset;
  const char* install_hint;
};

// Reads one split of a directory in the MNIST layout: {images (N, 1, 28, 28)
// float32 in [0, 1], labels (N) int64 in [0, 9]}.
Example read_mnist_split(const std::string& root, bool train, const MnistLayout& layout);

namespace datasets {

class MNIST : public Dataset<MNIST, TensorDataset> {
 public:
  enum class Mode { kTrain, kTest };
  static constexpr int64_t kNumClasses = 10;
  static constexpr int64_t kImageSize = 28;

  explicit MNIST(const std::string& root, Mode mode = Mode::kTrain);

  bool is_train() const { return train_; }
  const Tensor& images() const { return data(); }  // (N, 1, 28, 28) float32 in [0, 1]
  // targets(), (N) int64 in [0, 9], and size() come from TensorDataset.

 private:
  MNIST(Example loaded, bool train);
  bool train_;
};

}  // namespace datasets
}  // namespace lockstep::data
