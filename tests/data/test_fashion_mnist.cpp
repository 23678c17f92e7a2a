// tests/data/test_fashion_mnist.cpp — FashionMNIST on small IDX files written
// here (layout, scaling, every inconsistency rejected), and on the real
// dataset from the Debian package when it is installed.
#include <doctest/doctest.h>

#include <array>
#include <filesystem>

#include "core/error.h"
#include "core/native/native.h"
#include "data/data_loader.h"
#include "data/fashion_mnist.h"
#include "idx_files.h"
#include "tests/support/skip.h"

namespace ls = lockstep;
namespace lt = lockstep_test;

namespace {
constexpr uint32_t kPixels = 28 * 28;

// Writes a split of n images (pixel bytes from lt::pattern) and the given labels.
void write_split(const lt::TempDir& dir, const std::string& prefix, uint32_t n,
                 const std::vector<uint8_t>& labels, bool gz) {
  auto images = lt::idx_file({n, 28, 28}, lt::pattern(n * kPixels, 256));
  auto label_file = lt::idx_file({static_cast<uint32_t>(labels.size())}, labels);
  if (gz) {
    lt::write_gz(dir.file(prefix + "-images-idx3-ubyte.gz"), images);
    lt::write_gz(dir.file(prefix + "-labels-idx1-ubyte.gz"), label_file);
  } else {
    lt::write_plain(dir.file(prefix + "-images-idx3-ubyte"), images);
    lt::write_plain(dir.file(prefix + "-labels-idx1-ubyte"), label_file);
  }
}
}  // namespace

TEST_CASE("fashion_mnist: small gzipped split gives (N,1,28,28) floats in 0..1 and int64 labels") {
  lt::TempDir dir;
  write_split(dir, "train", 3, {9, 0, 4}, /*gz=*/true);
  ls::data::FashionMNIST train(dir.str(), /*train=*/true);
  REQUIRE(train.size() == 3);
  CHECK(train.is_train());
  CHECK(train.images().sizes() == ls::IntList{3, 1, 28, 28});
  CHECK(train.images().dtype() == ls::kFloat32);
  CHECK(train.labels().dtype() == ls::kInt64);
  CHECK(train.labels().to_vector<int64_t>() == std::vector<int64_t>{9, 0, 4});
  // Pixel k of the file becomes byte / 255.
  std::vector<uint8_t> bytes = lt::pattern(3 * kPixels, 256);
  std::vector<float> pixels = train.images().to_vector<float>();
  for (size_t k : {size_t{0}, size_t{1}, size_t{785}, size_t{3 * kPixels - 1}}) {
    CHECK(pixels[k] == doctest::Approx(bytes[k] / 255.0f));
  }
  CHECK(ls::native::max_all(train.images()).item<float>() <= 1.0f);
  CHECK(ls::native::min_all(train.images()).item<float>() >= 0.0f);
  ls::data::Example ex = train.get(2);
  CHECK(ex.data.sizes() == ls::IntList{1, 28, 28});
  CHECK(ex.target.dim() == 0);
  CHECK(ex.target.item<int64_t>() == 4);
  CHECK(ex.data.to_vector<float>()[0] == doctest::Approx(bytes[2 * kPixels] / 255.0f));
}

TEST_CASE("fashion_mnist: plain (decompressed) files and the test split") {
  lt::TempDir dir;
  write_split(dir, "t10k", 2, {1, 2}, /*gz=*/false);
  ls::data::FashionMNIST test(dir.str(), /*train=*/false);
  CHECK(test.size() == 2);
  CHECK_FALSE(test.is_train());
  CHECK(test.labels().to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  // Only the test split is there: asking for train names the missing file.
  CHECK_THROWS_WITH_AS(ls::data::FashionMNIST(dir.str(), true),
                       doctest::Contains("train-images-idx3-ubyte.gz"), ls::Error);
}

TEST_CASE("fashion_mnist: a missing directory says how to install the dataset") {
  lt::TempDir dir;
  const std::string missing = dir.file("no-such-dir");
  CHECK_THROWS_WITH_AS(ls::data::FashionMNIST(missing, true), doctest::Contains(missing.c_str()),
                       ls::Error);
  CHECK_THROWS_WITH_AS(ls::data::FashionMNIST(missing, true),
                       doctest::Contains("apt-get install dataset-fashion-mnist"), ls::Error);
  // An existing directory without the files names the file and the package too.
  CHECK_THROWS_WITH_AS(ls::data::FashionMNIST(dir.str(), false),
                       doctest::Contains("apt-get install dataset-fashion-mnist"), ls::Error);
}

TEST_CASE("fashion_mnist: label count different from image count is rejected") {
  lt::TempDir dir;
  write_split(dir, "train", 3, {1, 2}, /*gz=*/true);
  CHECK_THROWS_WITH_AS(ls::data::FashionMNIST(dir.str(), true),
                       doctest::Contains("holds 3 images but"), ls::Error);
}

TEST_CASE("fashion_mnist: labels outside 0..9 are rejected") {
  lt::TempDir dir;
  write_split(dir, "train", 2, {3, 10}, /*gz=*/true);
  CHECK_THROWS_WITH_AS(ls::data::FashionMNIST(dir.str(), true),
                       doctest::Contains("label 10 of example 1"), ls::Error);
}

TEST_CASE("fashion_mnist: images that are not 28x28 are rejected") {
  lt::TempDir dir;
  lt::write_gz(dir.file("train-images-idx3-ubyte.gz"), lt::idx_file({2, 32, 32}, lt::pattern(2048)));
  lt::write_gz(dir.file("train-labels-idx1-ubyte.gz"), lt::idx_file({2}, {0, 1}));
  CHECK_THROWS_WITH_AS(ls::data::FashionMNIST(dir.str(), true),
                       doctest::Contains("expected (N, 28, 28)"), ls::Error);
}

TEST_CASE("fashion_mnist: a truncated image file is rejected") {
  lt::TempDir dir;
  lt::write_gz(dir.file("train-images-idx3-ubyte.gz"),
               lt::idx_file({60000, 28, 28}, lt::pattern(5 * kPixels)));
  lt::write_gz(dir.file("train-labels-idx1-ubyte.gz"), lt::idx_file({5}, {0, 1, 2, 3, 4}));
  CHECK_THROWS_WITH_AS(ls::data::FashionMNIST(dir.str(), true), doctest::Contains("truncated"),
                       ls::Error);
}

TEST_CASE("fashion_mnist: the docs/api.md training-loop snippet on a small split") {
  lt::TempDir dir;
  write_split(dir, "train", 10, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, /*gz=*/true);
  ls::data::FashionMNIST train(dir.str(), /*train=*/true);
  const int64_t world = 2, rank = 1, epoch = 3;
  ls::data::DistributedSampler sampler(train.size(), /*num_replicas=*/world, /*rank=*/rank,
                                       /*shuffle=*/true, /*seed=*/0, /*drop_last=*/false);
  sampler.set_epoch(epoch);
  ls::data::DataLoader loader(train, ls::data::DataLoaderOptions(3).workers(1), sampler);
  std::vector<int64_t> labels;
  for (const auto& batch : loader) {
    CHECK(batch.data.dim() == 4);
    CHECK(batch.data.size(1) == 1);
    CHECK(batch.data.size(2) == 28);
    CHECK(batch.data.dtype() == ls::kFloat32);
    CHECK(batch.target.dtype() == ls::kInt64);
    for (int64_t l : batch.target.to_vector<int64_t>()) labels.push_back(l);
  }
  CHECK(labels == sampler.indices());  // label i is example i's, so the batches follow the shard
  CHECK(labels.size() == 5);
}

// Needs the installed data set: its own CTest entry, skipped (exit 77) without
// it (Note [Skipping a test case], tests/support/skip.h).
TEST_CASE("fashion_mnist: the real dataset (60000 + 10000 examples, ~balanced classes)" * doctest::skip()) {
  const std::string root = ls::data::FashionMNIST::kDefaultRoot;
  if (!std::filesystem::is_directory(root)) {
    ls::testing::skip_test(root + " is absent (apt-get install dataset-fashion-mnist)");
  }
  for (bool train : {true, false}) {
    ls::data::FashionMNIST ds(root, train);
    const int64_t n = train ? 60000 : 10000;
    REQUIRE(ds.size() == n);
    CHECK(ds.images().sizes() == ls::IntList{n, 1, 28, 28});
    CHECK(ls::native::min_all(ds.images()).item<float>() == 0.0f);
    CHECK(ls::native::max_all(ds.images()).item<float>() == 1.0f);
    const double mean = ls::native::mean(ds.images(), {}, false).item<double>();
    CHECK(mean > 0.2);  // Fashion-MNIST's pixel mean is about 0.286
    CHECK(mean < 0.4);
    std::array<int64_t, 10> histogram{};
    for (int64_t label : ds.labels().to_vector<int64_t>()) {
      REQUIRE(label >= 0);
      REQUIRE(label < 10);
      ++histogram[static_cast<size_t>(label)];
    }
    for (int64_t count : histogram) CHECK(count == n / 10);  // exactly balanced in both splits
  }
}
