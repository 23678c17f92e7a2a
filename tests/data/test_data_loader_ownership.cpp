// tests/data/test_data_loader_ownership.cpp — Note [Who owns the dataset] in
// data/data_loader.h: a loader given a temporary (or std::move(ds)) owns it, so
// `DataLoader loader(MyDataset(root), DataLoaderOptions(4));` works (it used to
// keep a reference to the destroyed temporary and crash at the first batch);
// make_data_loader owns its dataset and sampler; an lvalue is still borrowed;
// DataLoaderOptions().batch_size(64), libtorch's spelling.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "core/error.h"
#include "core/factory.h"
#include "data/data_loader.h"

namespace ls = lockstep;
namespace ld = lockstep::data;

namespace {
// Counts the instances alive: a loader that kept only a reference to a destroyed
// temporary would find none (checked before reading, so the test fails cleanly).
std::atomic<int> g_alive{0};

class Counted : public ld::Dataset {
 public:
  explicit Counted(int64_t n) : n_(n) { ++g_alive; }
  Counted(const Counted& o) : n_(o.n_) { ++g_alive; }
  Counted(Counted&& o) noexcept : n_(o.n_) { ++g_alive; }
  ~Counted() override { --g_alive; }
  int64_t size() const override { return n_; }
  ld::Example get(int64_t index) const override {
    return {ls::full({2}, static_cast<double>(index)), ls::scalar_tensor(index, ls::kInt64)};
  }

 private:
  int64_t n_;
};

std::vector<int64_t> targets(ld::DataLoader& loader) {
  std::vector<int64_t> out;
  for (const auto& batch : loader) {
    for (int64_t t : batch.target.to_vector<int64_t>()) out.push_back(t);
  }
  return out;
}

const std::vector<int64_t> kZeroToNine = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
}  // namespace

TEST_CASE("data_loader: a loader built from a temporary dataset owns it") {
  g_alive = 0;
  {
    ld::DataLoader loader(Counted(10), ld::DataLoaderOptions(4));
    REQUIRE(g_alive == 1);  // the temporary was moved in and is alive
    CHECK(loader.dataset().size() == 10);
    CHECK(targets(loader) == kZeroToNine);
    CHECK(targets(loader) == kZeroToNine);  // and on the next epoch
  }
  CHECK(g_alive == 0);  // and released with the loader
}

TEST_CASE("data_loader: std::move(ds) is owned, with a sampler and with workers") {
  g_alive = 0;
  {
    Counted ds(10);
    ld::SequentialSampler sampler(10);
    ld::DataLoader loader(std::move(ds), ld::DataLoaderOptions(3).workers(2), sampler);
    CHECK(g_alive == 2);  // the moved-from ds and the loader's own
    CHECK(targets(loader) == kZeroToNine);
  }
  CHECK(g_alive == 0);
}

TEST_CASE("data_loader: an lvalue dataset is borrowed, not copied") {
  g_alive = 0;
  Counted ds(10);
  ld::DataLoader loader(ds, ld::DataLoaderOptions(5));
  CHECK(g_alive == 1);
  CHECK(&loader.dataset() == &ds);
  CHECK(targets(loader) == kZeroToNine);
}

TEST_CASE("data_loader: make_data_loader owns its dataset and sampler, DataLoaderOptions().batch_size(n)") {
  g_alive = 0;
  {
    auto loader = ld::make_data_loader(Counted(10), ld::DataLoaderOptions().batch_size(4));
    CHECK(g_alive == 1);
    CHECK(loader->options().batch_size() == 4);
    CHECK(loader->size() == 3);
    CHECK(targets(*loader) == kZeroToNine);

    // An owned sampler is told the epoch at each begin(): a new order each epoch.
    auto shuffled = ld::make_data_loader(Counted(10), ld::RandomSampler(10, /*seed=*/3),
                                         ld::DataLoaderOptions().batch_size(10));
    std::vector<int64_t> e0 = targets(*shuffled), e1 = targets(*shuffled);
    CHECK(e0 != e1);
    std::vector<int64_t> sorted0 = e0;
    std::sort(sorted0.begin(), sorted0.end());
    CHECK(sorted0 == kZeroToNine);
  }
  CHECK(g_alive == 0);
  CHECK(ld::DataLoaderOptions().batch_size() == 1);  // libtorch's default
}

TEST_CASE("data_loader: a null shared dataset is refused with a message") {
  CHECK_THROWS_WITH_AS(ld::DataLoader(std::shared_ptr<const ld::Dataset>(), ld::DataLoaderOptions(2)),
                       doctest::Contains("dataset pointer is null"), ls::Error);
}
