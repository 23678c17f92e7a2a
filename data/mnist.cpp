// data/mnist.cpp — locating the four files of the MNIST layout and turning the
// raw IDX bytes into float images and int64 labels; the MNIST dataset.
// Read before: data/mnist.h, data/idx.h. Read next: data/fashion_mnist.cpp.
#include "data/mnist.h"

#include <filesystem>

#include "core/error.h"
#include "core/native/native.h"
#include "data/idx.h"

namespace lockstep::data {

namespace {
namespace fs = std::filesystem;

constexpr int64_t kNumClasses = 10;
constexpr int64_t kImageSize = 28;

// root/name.gz if present, else root/name; throws naming both when neither exists.
std::string find_file(const fs::path& root, const std::string& name, const MnistLayout& layout) {
  const fs::path gz = root / (name + ".gz");
  const fs::path plain = root / name;
  std::error_code ec;
  if (fs::is_regular_file(gz, ec)) return gz.string();
  if (fs::is_regular_file(plain, ec)) return plain.string();
  throw Error(detail::str(layout.dataset, ": neither '", gz.string(), "' nor '", plain.string(),
                          "' exists; ", layout.install_hint));
}
}  // namespace

Example read_mnist_split(const std::string& root, bool train, const MnistLayout& layout) {
  std::error_code ec;
  LS_CHECK(fs::is_directory(root, ec), layout.dataset, ": directory '", root,
           "' does not exist; ", layout.install_hint);
  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path = find_file(root, prefix + "-images-idx3-ubyte", layout);
  const std::string labels_path = find_file(root, prefix + "-labels-idx1-ubyte", layout);

  Tensor raw_images = read_idx(images_path, 3);  // (N, 28, 28) uint8
  Tensor raw_labels = read_idx(labels_path, 1);  // (N) uint8
  const int64_t n = raw_images.size(0);
  LS_CHECK(raw_images.size(1) == kImageSize && raw_images.size(2) == kImageSize, layout.dataset,
           ": '", images_path, "' holds images of shape ", raw_images.shape_str(),
           ", expected (N, 28, 28)");
  LS_CHECK(raw_labels.size(0) == n, layout.dataset, ": '", images_path, "' holds ", n,
           " images but '", labels_path, "' holds ", raw_labels.size(0),
           " labels; the files come from different splits or one is corrupt");
  const uint8_t* label_bytes = raw_labels.data_ptr<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    LS_CHECK(label_bytes[i] < kNumClasses, layout.dataset, ": label ", int{label_bytes[i]},
             " of example ", i, " in '", labels_path,
             "' is not a class in [0, 9]; the file is corrupt");
  }

  // Pixels 0..255 -> float32 in [0, 1].
  Tensor images = native::empty({n, 1, kImageSize, kImageSize}, kFloat32);  // (N, 1, 28, 28)
  const uint8_t* src = raw_images.data_ptr<uint8_t>();
  float* dst = images.data_ptr<float>();
  for (int64_t i = 0; i < images.numel(); ++i) dst[i] = static_cast<float>(src[i]) / 255.0f;
  Tensor labels = native::to_dtype(raw_labels, kInt64);  // (N)
  return {images, labels};
}

namespace datasets {

namespace {
constexpr MnistLayout kMnist{
    "MNIST",
    "put the four MNIST IDX files there (train-images-idx3-ubyte, train-labels-idx1-ubyte, "
    "t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte; plain or .gz), or pass a directory in the "
    "same layout, such as Fashion-MNIST's /usr/share/datasets/fashion-mnist (`apt-get install "
    "dataset-fashion-mnist`)"};
}  // namespace

MNIST::MNIST(const std::string& root, Mode mode)
    : MNIST(read_mnist_split(root, mode == Mode::kTrain, kMnist), mode == Mode::kTrain) {}

MNIST::MNIST(Example loaded, bool train)
    : Dataset<MNIST, TensorDataset>(std::move(loaded.data), std::move(loaded.target)),
      train_(train) {}

}  // namespace datasets
}  // namespace lockstep::data
