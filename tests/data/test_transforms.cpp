// tests/data/test_transforms.cpp — dataset.map(transform): Normalize's values
// (one mean, per channel), its errors, Stack, Lambda / TensorLambda, chained
// maps, a user's datasets::Dataset<Self>, and Note [Transforms on batches]:
// the loader's batches are the same bytes whether a transform runs on the
// stacked batch or on each example.
#include <doctest/doctest.h>

#include <atomic>
#include <memory>

#include "core/error.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "data/data_loader.h"
#include "data/map_dataset.h"
#include "data/transforms.h"

namespace ls = lockstep;
namespace transforms = ls::data::transforms;

namespace {

// A user's dataset in libtorch's style: example i is a (3, 2, 2) image of
// values i + 0.1 * k and the label i % 3. It counts get() calls.
class Squares : public ls::data::datasets::Dataset<Squares> {
 public:
  explicit Squares(int64_t n) : n_(n), gets_(std::make_shared<std::atomic<int64_t>>(0)) {}
  ls::data::Example get(int64_t index) const override {
    ++*gets_;
    std::vector<float> v(12);
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(index) + 0.1f * static_cast<float>(k);
    return {ls::tensor<float>(v, {3, 2, 2}), ls::scalar_tensor(static_cast<double>(index % 3),
                                                               ls::TensorOptions().dtype(ls::kInt64))};
  }
  int64_t size() const override { return n_; }
  int64_t gets() const { return *gets_; }

 private:
  int64_t n_;
  std::shared_ptr<std::atomic<int64_t>> gets_;
};

// Every batch of a loader over `ds`, data and targets concatenated.
template <class D>
std::pair<std::vector<float>, std::vector<int64_t>> drain(D ds, int64_t batch, int64_t workers) {
  ls::data::DataLoader loader(std::move(ds), ls::data::DataLoaderOptions(batch).workers(workers));
  std::vector<float> data;
  std::vector<int64_t> targets;
  for (const auto& b : loader) {
    for (float x : b.data.to_vector<float>()) data.push_back(x);
    for (int64_t t : b.target.to_vector<int64_t>()) targets.push_back(t);
  }
  return {data, targets};
}

}  // namespace

TEST_CASE("transforms: Normalize with one mean and stddev is (x - mean) / stddev in float32") {
  transforms::Normalize<> normalize(0.5, 0.25);
  ls::Tensor x = ls::tensor<float>({0.0f, 0.5f, 1.0f, 0.3f}, {1, 2, 2});
  ls::data::Example out = normalize.apply({x, ls::scalar_tensor(4.0)});
  CHECK(out.data.sizes() == ls::IntList{1, 2, 2});
  CHECK(out.data.dtype() == ls::kFloat32);
  const std::vector<float> v = out.data.to_vector<float>();
  CHECK(v[0] == -2.0f);
  CHECK(v[1] == 0.0f);
  CHECK(v[2] == 2.0f);
  CHECK(v[3] == (0.3f - 0.5f) / 0.25f);  // float32 arithmetic, subtraction then division
  CHECK(out.target.item<double>() == 4.0);  // the target is untouched
  CHECK(x.to_vector<float>()[0] == 0.0f);   // and so is the input
}

TEST_CASE("transforms: Normalize per channel uses channel c's mean and stddev in examples and batches") {
  transforms::Normalize normalize({1.0, 2.0, 3.0}, {1.0, 2.0, 4.0});  // CTAD: no <> needed
  Squares ds(2);
  const std::vector<float> raw = ds.get(1).data.to_vector<float>();  // 1 + 0.1k; channel c: k = 4c..4c+3
  ls::data::Example ex = normalize.apply(ds.get(1));
  const std::vector<float> v = ex.data.to_vector<float>();
  const double mean[3] = {1.0, 2.0, 3.0}, stddev[3] = {1.0, 2.0, 4.0};
  for (size_t k = 0; k < 12; ++k) {
    const size_t c = k / 4;
    CHECK(v[k] == (raw[k] - static_cast<float>(mean[c])) / static_cast<float>(stddev[c]));
  }
  // A batch (B, C, H, W) has its channels at dim 1.
  ls::data::Batch b = normalize.apply_batch(ds.get_batch({0, 1}));
  CHECK(b.data.sizes() == ls::IntList{2, 3, 2, 2});
  const std::vector<float> bv = b.data.to_vector<float>();
  CHECK(std::vector<float>(bv.begin() + 12, bv.end()) == v);
}

TEST_CASE("transforms: Normalize refuses bad settings and data it cannot normalise") {
  CHECK_THROWS_WITH_AS(transforms::Normalize<>(0.5, 0.0), doctest::Contains("non-zero"), ls::Error);
  CHECK_THROWS_WITH_AS(transforms::Normalize<>(std::vector<double>{0.5, 0.5}, {0.2}),
                       doctest::Contains("2 means and 1 standard deviations"), ls::Error);
  CHECK_THROWS_WITH_AS(transforms::Normalize<>(std::vector<double>{}, {}),
                       doctest::Contains("0 means"), ls::Error);
  transforms::Normalize<> three({0.1, 0.2, 0.3}, {1.0, 1.0, 1.0});
  ls::Tensor grey = ls::zeros({1, 28, 28});
  CHECK_THROWS_WITH_AS(three.apply({grey, ls::Tensor()}),
                       doctest::Contains("3 means (one per channel) but the data [1, 28, 28] has 1 channels"),
                       ls::Error);
  ls::Tensor bytes = ls::zeros({1, 2, 2}, ls::TensorOptions().dtype(ls::kUInt8));
  CHECK_THROWS_WITH_AS(transforms::Normalize<>(0.5, 0.5).apply({bytes, ls::Tensor()}),
                       doctest::Contains("expects floating data but got uint8"), ls::Error);
  CHECK_THROWS_WITH_AS(transforms::TensorLambda(nullptr), doctest::Contains("empty"), ls::Error);
}

TEST_CASE("transforms: map(Normalize).map(Stack) gives the same batches on the batch path as per example") {
  // Normalize has apply_batch, so the loader normalises whole batches; the
  // same transform wrapped in a Lambda has none and runs per example.
  transforms::Normalize<> normalize({0.5, 1.5, 2.5}, {0.3, 0.7, 1.1});
  auto batched = Squares(7).map(normalize).map(transforms::Stack<>());
  auto per_example = Squares(7).map(transforms::Lambda(
      [normalize](ls::data::Example e) { return normalize.apply(std::move(e)); }));
  CHECK(batched.size() == 7);
  for (int64_t workers : {0, 2}) {
    auto a = drain(batched, 3, workers);
    auto b = drain(per_example, 3, workers);
    REQUIRE(a.first.size() == 7 * 12);
    CHECK(a.first == b.first);  // bitwise
    CHECK(a.second == b.second);
    CHECK(a.second == std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0});
  }
  // Stack alone changes nothing.
  CHECK(drain(Squares(5).map(transforms::Stack<>()), 2, 0) == drain(Squares(5), 2, 0));
}

TEST_CASE("transforms: map on a temporary takes it over and on an lvalue copies it and maps chain") {
  Squares source(4);
  auto mapped = source.map(transforms::TensorLambda([](ls::Tensor x) {
    return ls::native::binary_scalar(ls::native::BinaryOp::Mul, x, 2.0);
  }));
  auto twice = std::move(mapped).map(transforms::TensorLambda([](ls::Tensor x) {
    return ls::native::binary_scalar(ls::native::BinaryOp::Add, x, 1.0);
  }));
  ls::data::Example ex = twice.get(3);  // (3 + 0.1k) * 2 + 1
  CHECK(ex.data.to_vector<float>()[0] == 7.0f);
  CHECK(ex.target.item<int64_t>() == 0);
  CHECK(twice.dataset().dataset().size() == 4);
  // The copy shares the counter of `source` (a shared_ptr member), so the gets went through it.
  CHECK(source.gets() == 1);
  // A per-example transform reads the source once per example of the batch.
  ls::data::Batch b = twice.get_batch({0, 1, 2});
  CHECK(b.data.sizes() == ls::IntList{3, 3, 2, 2});
  CHECK(source.gets() == 4);
}

TEST_CASE("transforms: make_data_loader spellings with a batch size and a sampler type") {
  auto ds = Squares(5).map(transforms::Stack<>());
  auto sequential = ls::data::make_data_loader<ls::data::SequentialSampler>(ds, 2);
  CHECK(sequential->size() == 3);
  std::vector<int64_t> seen;
  for (auto& batch : *sequential) {
    for (int64_t t : batch.target.to_vector<int64_t>()) seen.push_back(t);
  }
  CHECK(seen == std::vector<int64_t>{0, 1, 2, 0, 1});
  auto plain = ls::data::make_data_loader(ds, 4);
  CHECK(plain->size() == 2);
  ls::data::DistributedSampler shard(ds.size(), /*num_replicas=*/2, /*rank=*/1, /*shuffle=*/false);
  auto sharded = ls::data::make_data_loader(ds, shard, 8);
  CHECK(sharded->size() == 1);
  for (auto& batch : *sharded) {
    CHECK(batch.target.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0});  // examples 1, 3, 0
  }
  auto shuffled = ls::data::make_data_loader<ls::data::RandomSampler>(ds, ls::data::DataLoaderOptions(5));
  for (auto& batch : *shuffled) CHECK(batch.data.size(0) == 5);
}
