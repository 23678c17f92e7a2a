// tests/data/test_data_loader.cpp — DataLoader: batch shapes, the last partial
// batch and drop_last, identical batches for 0/1/2 workers, bounded prefetch,
// leaving a loop early, exceptions from loading, options validation.
#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>

#include "core/error.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "data/data_loader.h"
#include "data/synthetic.h"

namespace ls = lockstep;
namespace ld = lockstep::data;

namespace {
// n examples: data (2, 3) filled with the index, target the index (0-d int64).
ld::TensorDataset numbered(int64_t n) {
  ls::Tensor data = ls::native::reshape(ls::arange(0, n, 1, ls::kFloat32), {n, 1, 1});
  data = ls::native::contiguous(ls::native::expand(data, {n, 2, 3}));  // (N, 2, 3)
  return ld::TensorDataset(data, ls::arange(n));                      // targets (N)
}

// Every batch's targets, in order.
std::vector<std::vector<int64_t>> all_targets(ld::DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& batch : loader) out.push_back(batch.target.to_vector<int64_t>());
  return out;
}

// Counts get() calls and throws for one chosen index.
class Faulty : public ld::Dataset {
 public:
  explicit Faulty(int64_t n, int64_t bad = -1) : n_(n), bad_(bad) {}
  int64_t size() const override { return n_; }
  ld::Example get(int64_t index) const override {
    ++calls;
    if (index == bad_) throw std::runtime_error("cannot decode example " + std::to_string(index));
    return {ls::full({4}, static_cast<double>(index)), ls::scalar_tensor(index, ls::kInt64)};
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t n_, bad_;
};
}  // namespace

TEST_CASE("data_loader: batch shapes, a last partial batch, and drop_last") {
  ld::TensorDataset ds = numbered(10);
  ld::DataLoader loader(ds, ld::DataLoaderOptions(4));
  CHECK(loader.size() == 3);
  std::vector<int64_t> sizes;
  for (const auto& batch : loader) {
    CHECK(batch.data.dim() == 3);
    CHECK(batch.data.size(1) == 2);
    CHECK(batch.data.size(2) == 3);
    CHECK(batch.target.dim() == 1);
    CHECK(batch.target.size(0) == batch.data.size(0));
    sizes.push_back(batch.data.size(0));
  }
  CHECK(sizes == std::vector<int64_t>{4, 4, 2});
  CHECK(all_targets(loader) ==
        std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}});
  // Row i of a batch is example i's data.
  for (const auto& batch : loader) {
    std::vector<float> d = batch.data.to_vector<float>();
    std::vector<int64_t> t = batch.target.to_vector<int64_t>();
    for (size_t i = 0; i < t.size(); ++i) CHECK(d[i * 6 + 5] == static_cast<float>(t[i]));
  }
  ld::DataLoader dropping(ds, ld::DataLoaderOptions(4).drop_last(true));
  CHECK(dropping.size() == 2);
  CHECK(all_targets(dropping) == std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}});
}

TEST_CASE("data_loader: workers 0, 1 and 2 give the same batches in the same order") {
  ld::TensorDataset ds = numbered(37);
  ld::SyntheticMaskedLM mlm(23, 8, 50, 0.3, 9);
  for (bool use_mlm : {false, true}) {
    const ld::Dataset& data = use_mlm ? static_cast<const ld::Dataset&>(mlm) : ds;
    std::vector<std::vector<float>> reference;
    for (int64_t workers : {0, 1, 2}) {
      ld::DataLoader loader(data, ld::DataLoaderOptions(5).shuffle(true).seed(42).workers(workers));
      std::vector<std::vector<float>> got;
      for (int epoch = 0; epoch < 2; ++epoch) {
        for (const auto& batch : loader) {
          got.push_back(ls::native::to_dtype(batch.data, ls::kFloat32).to_vector<float>());
          got.push_back(ls::native::to_dtype(batch.target, ls::kFloat32).to_vector<float>());
        }
      }
      if (workers == 0) {
        reference = got;
        CHECK(reference.size() == 2 * 2 * ((data.size() + 4) / 5));
      } else {
        CAPTURE(workers);
        CHECK(got == reference);
      }
    }
  }
}

TEST_CASE("data_loader: shuffle visits every example once, in a new order each epoch") {
  ld::TensorDataset ds = numbered(30);
  ld::DataLoader loader(ds, ld::DataLoaderOptions(7).shuffle(true).seed(1).workers(1));
  std::vector<int64_t> epochs[2];
  for (auto& order : epochs) {
    for (const auto& batch : loader) {
      for (int64_t t : batch.target.to_vector<int64_t>()) order.push_back(t);
    }
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == ls::arange(30).to_vector<int64_t>());
  }
  CHECK(epochs[0] != epochs[1]);
  CHECK(epochs[0] == ld::permutation(30, 1));  // epoch 0 of RandomSampler(n, seed)
}

TEST_CASE("data_loader: follows an explicit DistributedSampler") {
  ld::TensorDataset ds = numbered(11);
  std::vector<int64_t> seen;
  for (int64_t rank = 0; rank < 2; ++rank) {
    ld::DistributedSampler sampler(ds.size(), 2, rank, true, 0);
    sampler.set_epoch(4);
    ld::DataLoader loader(ds, ld::DataLoaderOptions(4).workers(1), sampler);
    std::vector<int64_t> mine;
    for (const auto& batch : loader) {
      for (int64_t t : batch.target.to_vector<int64_t>()) mine.push_back(t);
    }
    CHECK(mine == sampler.indices());
    seen.insert(seen.end(), mine.begin(), mine.end());
  }
  CHECK(seen.size() == 12);  // 11 examples padded to 2 x 6
  std::sort(seen.begin(), seen.end());
  CHECK(std::unique(seen.begin(), seen.end()) - seen.begin() == 11);
}

TEST_CASE("data_loader: per-example datasets are stacked") {
  Faulty ds(5);
  ld::DataLoader loader(ds, ld::DataLoaderOptions(2).workers(2));
  int64_t batches = 0;
  for (const auto& batch : loader) {
    CHECK(batch.data.size(1) == 4);
    CHECK(batch.target.dim() == 1);
    CHECK(batch.data.to_vector<float>()[0] == static_cast<float>(batch.target.to_vector<int64_t>()[0]));
    ++batches;
  }
  CHECK(batches == 3);
  CHECK(ds.calls.load() == 5);
}

TEST_CASE("data_loader: leaving a loop early stops the workers, and loading stays bounded") {
  Faulty ds(1000);
  {
    ld::DataLoader loader(ds, ld::DataLoaderOptions(2).workers(2).prefetch(1));
    int64_t taken = 0;
    for (const auto& batch : loader) {
      CHECK(batch.data.size(0) == 2);
      if (++taken == 1) break;  // must not hang
    }
    CHECK(taken == 1);
    // Joined: no more loading after the loop. One batch consumed plus at most
    // prefetch * workers = 2 claimed ahead, 2 examples each.
    const int64_t calls = ds.calls.load();
    CHECK(calls <= 2 * (1 + 2));
    CHECK(ds.calls.load() == calls);
    // An iterator dropped mid-epoch (never run to the end) also joins cleanly.
    auto it = loader.begin();
    ++it;
    CHECK(it != loader.end());
  }
  CHECK(ds.calls.load() <= 2 * (1 + 2) + 2 * (2 + 2));
}

TEST_CASE("data_loader: an exception while loading reaches the consumer in order") {
  for (int64_t workers : {0, 1, 2}) {
    CAPTURE(workers);
    Faulty ds(40, /*bad=*/13);
    ld::DataLoader loader(ds, ld::DataLoaderOptions(4).workers(workers));
    int64_t before = 0;
    auto loop = [&] {
      for (const auto& batch : loader) {
        CHECK(batch.data.size(0) == 4);
        ++before;
      }
    };
    CHECK_THROWS_WITH_AS(loop(), "cannot decode example 13", std::runtime_error);
    CHECK(before == 3);  // batches 0..2 arrive, batch 3 (examples 12..15) fails
    // The loader is still usable for the next epoch (and fails at the same place).
    before = 0;
    CHECK_THROWS_AS(loop(), std::runtime_error);
    CHECK(before == 3);
  }
  // A failure in the first batch comes out of begin().
  Faulty first(8, 0);
  ld::DataLoader loader(first, ld::DataLoaderOptions(4).workers(1));
  CHECK_THROWS_AS(loader.begin(), std::runtime_error);
}

TEST_CASE("data_loader: an empty dataset gives no batches") {
  ld::TensorDataset ds = numbered(0);
  for (int64_t workers : {0, 2}) {
    ld::DataLoader loader(ds, ld::DataLoaderOptions(3).workers(workers));
    CHECK(loader.size() == 0);
    CHECK(loader.begin() == loader.end());
  }
}

TEST_CASE("data_loader: bad options and a sampler larger than the dataset are errors") {
  ld::TensorDataset ds = numbered(4);
  CHECK_THROWS_WITH_AS(ld::DataLoader(ds, ld::DataLoaderOptions(0)),
                       doctest::Contains("batch_size must be >= 1"), ls::Error);
  CHECK_THROWS_WITH_AS(ld::DataLoader(ds, ld::DataLoaderOptions(2).workers(-1)),
                       doctest::Contains("workers must be >= 0"), ls::Error);
  CHECK_THROWS_WITH_AS(ld::DataLoader(ds, ld::DataLoaderOptions(2).prefetch(0)),
                       doctest::Contains("prefetch must be >= 1"), ls::Error);
  ld::SequentialSampler sampler(4);
  CHECK_THROWS_WITH_AS(ld::DataLoader(ds, ld::DataLoaderOptions(2).shuffle(true), sampler),
                       doctest::Contains("explicit sampler"), ls::Error);
  ld::SequentialSampler too_big(6);
  ld::DataLoader loader(ds, ld::DataLoaderOptions(2), too_big);
  CHECK_THROWS_WITH_AS(loader.begin(), doctest::Contains("sampler yielded index 4"), ls::Error);
}
