// tests/data/test_mnist.cpp — datasets::MNIST in libtorch's spelling, on small
// IDX files written here: layout and scaling, Mode::kTest, and a clear error
// for a missing, short or wrong-magic file.
#include <doctest/doctest.h>

#include "core/error.h"
#include "data/data_loader.h"
#include "data/mnist.h"
#include "data/transforms.h"
#include "idx_files.h"

namespace ls = lockstep;
namespace lt = lockstep_test;
using MNIST = ls::data::datasets::MNIST;

namespace {
constexpr uint32_t kPixels = 28 * 28;

void write_mnist_split(const lt::TempDir& dir, const std::string& prefix,
                       const std::vector<uint8_t>& labels) {
  const auto n = static_cast<uint32_t>(labels.size());
  lt::write_plain(dir.file(prefix + "-images-idx3-ubyte"),
                  lt::idx_file({n, 28, 28}, lt::pattern(n * kPixels, 256)));
  lt::write_plain(dir.file(prefix + "-labels-idx1-ubyte"), lt::idx_file({n}, labels));
}
}  // namespace

TEST_CASE("mnist: MNIST(root) is the training split of (N 1 28 28) float32 images in 0..1") {
  lt::TempDir dir;
  write_mnist_split(dir, "train", {7, 2, 1, 0});
  write_mnist_split(dir, "t10k", {5, 9});
  MNIST train(dir.str());
  REQUIRE(train.size() == 4);
  CHECK(train.is_train());
  CHECK(train.images().sizes() == ls::IntList{4, 1, 28, 28});
  CHECK(train.images().dtype() == ls::kFloat32);
  CHECK(train.targets().to_vector<int64_t>() == std::vector<int64_t>{7, 2, 1, 0});
  const std::vector<uint8_t> bytes = lt::pattern(4 * kPixels, 256);
  const std::vector<float> pixels = train.images().to_vector<float>();
  for (size_t k : {size_t{0}, size_t{100}, size_t{4 * kPixels - 1}}) {
    CHECK(pixels[k] == doctest::Approx(bytes[k] / 255.0f));
  }
  MNIST test(dir.str(), MNIST::Mode::kTest);
  CHECK_FALSE(test.is_train());
  CHECK(test.targets().to_vector<int64_t>() == std::vector<int64_t>{5, 9});
  ls::data::Example ex = test.get(1);
  CHECK(ex.data.sizes() == ls::IntList{1, 28, 28});
  CHECK(ex.target.item<int64_t>() == 9);
}

TEST_CASE("mnist: a missing directory or file names the path and the four files") {
  lt::TempDir dir;
  const std::string missing = dir.file("no-such-dir");
  CHECK_THROWS_WITH_AS(MNIST{missing}, doctest::Contains(missing.c_str()), ls::Error);
  CHECK_THROWS_WITH_AS(MNIST{missing}, doctest::Contains("MNIST: directory"), ls::Error);
  write_mnist_split(dir, "train", {1, 2});
  // The test split is absent: its first file is named, with both spellings.
  CHECK_THROWS_WITH_AS(MNIST(dir.str(), MNIST::Mode::kTest),
                       doctest::Contains("t10k-images-idx3-ubyte.gz' nor '"), ls::Error);
  CHECK_THROWS_WITH_AS(MNIST(dir.str(), MNIST::Mode::kTest),
                       doctest::Contains("t10k-labels-idx1-ubyte"), ls::Error);
}

TEST_CASE("mnist: a short file is refused in its header or its data") {
  lt::TempDir dir;
  write_mnist_split(dir, "train", {1, 2, 3});
  // Two bytes: not even the magic number.
  lt::write_plain(dir.file("train-labels-idx1-ubyte"), {0, 0});
  CHECK_THROWS_WITH_AS(MNIST{dir.str()}, doctest::Contains("too short to hold an IDX header"),
                       ls::Error);
  // The header promises 3 labels, the file holds 2.
  lt::write_plain(dir.file("train-labels-idx1-ubyte"), lt::idx_file({3}, {1, 2}));
  CHECK_THROWS_WITH_AS(MNIST{dir.str()}, doctest::Contains("truncated"), ls::Error);
  // Images cut inside the dim sizes of the header.
  std::vector<uint8_t> header = lt::idx_header({3, 28, 28});
  header.resize(9);
  lt::write_plain(dir.file("train-labels-idx1-ubyte"), lt::idx_file({3}, {1, 2, 3}));
  lt::write_plain(dir.file("train-images-idx3-ubyte"), header);
  CHECK_THROWS_WITH_AS(MNIST{dir.str()}, doctest::Contains("truncated inside its header"),
                       ls::Error);
}

TEST_CASE("mnist: a wrong magic number (labels where images belong) is refused") {
  lt::TempDir dir;
  write_mnist_split(dir, "train", {1, 2});
  // The label file's bytes under the image file's name: magic 0x801, not 0x803.
  lt::write_plain(dir.file("train-images-idx3-ubyte"), lt::idx_file({2}, {1, 2}));
  CHECK_THROWS_WITH_AS(MNIST{dir.str()}, doctest::Contains("magic number 0x801, expected 0x803"),
                       ls::Error);
  // A file that is not IDX at all.
  lt::write_plain(dir.file("train-images-idx3-ubyte"), {'P', '5', '\n', '2', '8', ' ', '2', '8'});
  CHECK_THROWS_WITH_AS(MNIST{dir.str()}, doctest::Contains("is not the IDX file it is named as"),
                       ls::Error);
}

TEST_CASE("mnist: images and labels of different lengths and a label of 10 are refused") {
  lt::TempDir dir;
  write_mnist_split(dir, "train", {1, 2});
  lt::write_plain(dir.file("train-labels-idx1-ubyte"), lt::idx_file({3}, {1, 2, 3}));
  CHECK_THROWS_WITH_AS(MNIST{dir.str()}, doctest::Contains("holds 2 images but"), ls::Error);
  lt::write_plain(dir.file("train-labels-idx1-ubyte"), lt::idx_file({2}, {1, 10}));
  CHECK_THROWS_WITH_AS(MNIST{dir.str()}, doctest::Contains("MNIST: label 10 of example 1"),
                       ls::Error);
}

TEST_CASE("mnist: the cpp/mnist lines: map(Normalize).map(Stack) and make_data_loader<Sampler>") {
  lt::TempDir dir;
  write_mnist_split(dir, "train", {0, 1, 2, 3, 4, 5, 6});
  auto train_dataset = MNIST(dir.str())
                           .map(ls::data::transforms::Normalize<>(0.1307, 0.3081))
                           .map(ls::data::transforms::Stack<>());
  const int64_t train_dataset_size = train_dataset.size();
  CHECK(train_dataset_size == 7);
  auto train_loader = ls::data::make_data_loader<ls::data::SequentialSampler>(
      std::move(train_dataset), /*batch_size=*/3);
  std::vector<int64_t> labels;
  std::vector<int64_t> batch_sizes;
  const std::vector<uint8_t> bytes = lt::pattern(7 * kPixels, 256);
  for (auto& batch : *train_loader) {
    CHECK(batch.data.dim() == 4);
    CHECK(batch.data.size(1) == 1);
    batch_sizes.push_back(batch.data.size(0));
    const float first = batch.data.to_vector<float>()[0];
    const size_t k = labels.size() * kPixels;  // the first pixel of this batch's first image
    CHECK(first == doctest::Approx((bytes[k] / 255.0 - 0.1307) / 0.3081).epsilon(1e-5));
    for (int64_t l : batch.target.to_vector<int64_t>()) labels.push_back(l);
  }
  CHECK(batch_sizes == std::vector<int64_t>{3, 3, 1});
  CHECK(labels == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6});  // sequential order
}
