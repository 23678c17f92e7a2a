// data/fashion_mnist.cpp — locating the Fashion-MNIST files and turning the
// raw IDX bytes into float images and int64 labels.
// Read before: data/fashion_mnist.h, data/idx.h. Read next: data/synthetic.cpp.
#include "data/fashion_mnist.h"

#include <filesystem>

#include "core/error.h"
#include "core/native/native.h"
#include "data/idx.h"

namespace lockstep::data {

namespace {
namespace fs = std::filesystem;

constexpr const char* kInstallHint =
    "install it with `apt-get install dataset-fashion-mnist` (it goes to "
    "/usr/share/datasets/fashion-mnist) or pass the directory that holds the IDX files";

// root/name.gz if present, else root/name; throws naming both when neither exists.
std::string find_file(const fs::path& root, const std::string& name) {
  const fs::path gz = root / (name + ".gz");
  const fs::path plain = root / name;
  std::error_code ec;
  if (fs::is_regular_file(gz, ec)) return gz.string();
  if (fs::is_regular_file(plain, ec)) return plain.string();
  throw Error(detail::str("FashionMNIST: neither '", gz.string(), "' nor '", plain.string(),
                          "' exists; ", kInstallHint));
}
}  // namespace

Example read_fashion_mnist(const std::string& root, bool train) {
  std::error_code ec;
  LS_CHECK(fs::is_directory(root, ec), "FashionMNIST: directory '", root, "' does not exist; ",
           kInstallHint);
  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path = find_file(root, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_file(root, prefix + "-labels-idx1-ubyte");

  Tensor raw_images = read_idx(images_path, 3);  // (N, 28, 28) uint8
  Tensor raw_labels = read_idx(labels_path, 1);  // (N) uint8
  const int64_t n = raw_images.size(0);
  LS_CHECK(raw_images.size(1) == FashionMNIST::kImageSize &&
               raw_images.size(2) == FashionMNIST::kImageSize,
           "FashionMNIST: '", images_path, "' holds images of shape ", raw_images.shape_str(),
           ", expected (N, 28, 28)");
  LS_CHECK(raw_labels.size(0) == n, "FashionMNIST: '", images_path, "' holds ", n,
           " images but '", labels_path, "' holds ", raw_labels.size(0),
           " labels; the files come from different splits or one is corrupt");
  const uint8_t* label_bytes = raw_labels.data_ptr<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    LS_CHECK(label_bytes[i] < FashionMNIST::kNumClasses, "FashionMNIST: label ",
             int{label_bytes[i]}, " of example ", i, " in '", labels_path,
             "' is not a class in [0, 9]; the file is corrupt");
  }

  // Pixels 0..255 -> float32 in [0, 1].
  Tensor images = native::empty({n, 1, FashionMNIST::kImageSize, FashionMNIST::kImageSize},
                                kFloat32);  // (N, 1, 28, 28)
  const uint8_t* src = raw_images.data_ptr<uint8_t>();
  float* dst = images.data_ptr<float>();
  for (int64_t i = 0; i < images.numel(); ++i) dst[i] = static_cast<float>(src[i]) / 255.0f;
  Tensor labels = native::to_dtype(raw_labels, kInt64);  // (N)
  return {images, labels};
}

FashionMNIST::FashionMNIST(const std::string& root, bool train)
    : FashionMNIST(read_fashion_mnist(root, train), train) {}

FashionMNIST::FashionMNIST(Example loaded, bool train)
    : TensorDataset(std::move(loaded.data), std::move(loaded.target)), train_(train) {}

const std::array<const char*, 10>& FashionMNIST::class_names() {
  static const std::array<const char*, 10> names = {"T-shirt/top", "Trouser", "Pullover",
                                                     "Dress",       "Coat",    "Sandal",
                                                     "Shirt",       "Sneaker", "Bag",
                                                     "Ankle boot"};
  return names;
}

}  // namespace lockstep::data
