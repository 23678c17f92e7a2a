// examples/custom_dataset_net.h — the data set and the network of the custom_dataset port
// (examples/custom_dataset.cpp, pytorch/examples' cpp/custom-dataset), in a header of their own
// so that bench/bench_custom_dataset_replay.cpp trains exactly these beside PyTorch:
//   CustomDataset   a folder of binary PPM (P6) / PGM (P5) images listed in an info file, each
//                   read, resized (nearest neighbour) and scaled to [0, 1] on every visit;
//   read_info       the info file's train and test lists, in the file's order;
//   make_network    AlexNet's layers with every width divided by a divisor, log_softmax at the end.
// Read before: data/map_dataset.h, nn/sequential.h. Read next: examples/custom_dataset.cpp.
#pragma once

#include <lockstep.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace examples {

namespace ls = lockstep;

using Data = std::vector<std::pair<std::string, int64_t>>;

// A binary PPM (P6) or PGM (P5) file with maxval 255 as (3, height, width) uint8.
inline ls::Tensor read_netpbm(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LS_CHECK(in.is_open(), "cannot open image '", path, "'");
  std::string magic;
  int64_t width = 0, height = 0, maxval = 0;
  in >> magic >> width >> height >> maxval;
  LS_CHECK(in && (magic == "P6" || magic == "P5") && width > 0 && height > 0 && maxval == 255,
           "'", path, "' is not a binary PPM (P6) or PGM (P5) image with maxval 255");
  in.get();  // the single whitespace byte after maxval
  const int64_t channels = magic == "P6" ? 3 : 1;
  std::vector<uint8_t> pixels(static_cast<size_t>(width * height * channels));
  in.read(reinterpret_cast<char*>(pixels.data()), static_cast<std::streamsize>(pixels.size()));
  LS_CHECK(in.gcount() == static_cast<std::streamsize>(pixels.size()), "'", path,
           "' is truncated: ", in.gcount(), " of ", pixels.size(), " pixel bytes");
  // Interleaved (h, w, c) bytes -> planes (3, h, w); grey is repeated into all three.
  ls::Tensor image = ls::empty({3, height, width}, ls::TensorOptions().dtype(ls::kUInt8));
  uint8_t* out = image.data_ptr<uint8_t>();
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t i = 0; i < height * width; ++i) {
      out[c * height * width + i] = pixels[static_cast<size_t>(i * channels + (channels == 3 ? c : 0))];
    }
  }
  return image;
}

// image (3, h, w) uint8 -> (3, size, size) float32 in [0, 1], nearest neighbour.
inline ls::Tensor resize_to_float(const ls::Tensor& image, int64_t size) {
  const int64_t h = image.size(1), w = image.size(2);
  ls::Tensor out = ls::empty({3, size, size});
  const uint8_t* src = image.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t y = 0; y < size; ++y) {
      const int64_t sy = y * h / size;
      for (int64_t x = 0; x < size; ++x) {
        dst[(c * size + y) * size + x] = static_cast<float>(src[(c * h + sy) * w + x * w / size]) / 255.0f;
      }
    }
  }
  return out;
}

class CustomDataset : public ls::data::datasets::Dataset<CustomDataset> {
 public:
  CustomDataset(Data data, std::string root, int64_t image_size)
      : data_(std::move(data)), root_(std::move(root)), image_size_(image_size) {}

  ls::data::Example get(int64_t index) const override {
    const std::string path = (std::filesystem::path(root_) / data_[static_cast<size_t>(index)].first).string();
    ls::Tensor tdata = resize_to_float(read_netpbm(path), image_size_);  // (3, S, S)
    ls::Tensor tlabel = ls::scalar_tensor(static_cast<double>(data_[static_cast<size_t>(index)].second),
                                          ls::TensorOptions().dtype(ls::kInt64));
    return {tdata, tlabel};
  }

  int64_t size() const override { return static_cast<int64_t>(data_.size()); }

 private:
  Data data_;
  std::string root_;
  int64_t image_size_;
};

// The info file's train and test lists, in the file's order. `path` is the info file
// (--info; one line per image: "path label train|test").
inline std::pair<Data, Data> read_info(const std::string& path) {
  std::ifstream stream(path);
  LS_CHECK(stream.is_open(), "cannot open the info file '", path,
           "' (--info; one line per image: path label train|test)");
  Data train, test;
  std::string line;
  for (int64_t number = 1; std::getline(stream, line); ++number) {
    std::istringstream fields(line);
    std::string image, type;
    int64_t label = -1;
    if (!(fields >> image)) continue;  // a blank line
    fields >> label >> type;
    LS_CHECK(fields && label >= 0 && (type == "train" || type == "test"),
             path, ":", number, ": expected 'path label train|test' with a label >= 0, got '", line, "'");
    (type == "train" ? train : test).emplace_back(image, label);
  }
  LS_CHECK(!train.empty() && !test.empty(), path, " lists ", train.size(), " training and ", test.size(),
           " test images; both splits need some");
  return {train, test};
}

// The number of classes: one more than the largest label of either list.
inline int64_t count_classes(const std::pair<Data, Data>& data) {
  int64_t classes = 0;
  for (const auto* list : {&data.first, &data.second}) {
    for (const auto& [image, label] : *list) classes = std::max(classes, label + 1);
  }
  return classes;
}

// AlexNet's layers; widths divided by `div`. Input (N, 3, S, S) -> log-probabilities (N, classes).
inline std::shared_ptr<ls::nn::Sequential> make_network(int64_t image_size, int64_t div, int64_t classes) {
  using namespace ls::nn;
  auto relu = [] { return std::make_shared<Functional>(ls::relu); };
  auto pool = [] {
    return std::make_shared<Functional>([](const ls::Tensor& x) { return ls::max_pool2d(x, 3, /*stride=*/2); });
  };
  auto features = std::make_shared<Sequential>(
      std::make_shared<Conv2d>(Conv2dOptions(3, 64 / div, 11).stride(4).padding(2)), relu(), pool(),
      std::make_shared<Conv2d>(Conv2dOptions(64 / div, 192 / div, 5).padding(2)), relu(), pool(),
      std::make_shared<Conv2d>(Conv2dOptions(192 / div, 384 / div, 3).padding(1)), relu(),
      std::make_shared<Conv2d>(Conv2dOptions(384 / div, 256 / div, 3).padding(1)), relu(),
      std::make_shared<Conv2d>(Conv2dOptions(256 / div, 256 / div, 3).padding(1)), relu(), pool());
  // The flattened feature size (256 * 6 * 6 at 224 x 224), from one forward of zeros.
  int64_t flat = 0;
  {
    ls::NoGradGuard no_grad;
    flat = features->forward(ls::zeros({1, 3, image_size, image_size})).numel();
  }
  auto network = std::make_shared<Sequential>();
  network->push_back("features", features);
  network->push_back(std::make_shared<Functional>([flat](const ls::Tensor& x) { return x.reshape({-1, flat}); }));
  network->push_back(std::make_shared<Dropout>());
  network->push_back(std::make_shared<Linear>(flat, 4096 / div));
  network->push_back(relu());
  network->push_back(std::make_shared<Dropout>());
  network->push_back(std::make_shared<Linear>(4096 / div, 4096 / div));
  network->push_back(relu());
  network->push_back(std::make_shared<Linear>(4096 / div, classes));
  network->push_back(std::make_shared<Functional>([](const ls::Tensor& x) { return ls::log_softmax(x, 1); }));
  return network;
}

}  // namespace examples
