// data/data_loader.h — DataLoader: batches from a Dataset in a Sampler's order,
// loaded ahead of time on background threads.
//
//   ls::data::DataLoader loader(train, ls::data::DataLoaderOptions(64).workers(1), sampler);
//   for (const auto& batch : loader) { batch.data; batch.target; }   // (B, ...) each
//
// Each range-for (each begin()) is one epoch: the loader takes the sampler's
// indices once, cuts them into batches of batch_size (the last one smaller
// unless drop_last), and yields them in order. See Note [DataLoader threads].
//
// § Note [DataLoader threads]
// With workers(n >= 1), n threads load batches ahead of the consumer: a thread
// takes the next unclaimed batch number k, builds it with
// dataset.get_batch(indices of batch k), and files the result under k. The
// consumer takes batch 0, 1, 2, ... strictly in order, waiting if batch k is
// not ready yet. A batch depends only on its indices, never on which thread
// built it, so the batches are the same for every worker count (workers(0)
// loads on the consumer's own thread). At most prefetch * n batches are claimed
// and not yet consumed (the bounded queue), so loading never runs far ahead.
// An exception thrown while loading batch k is stored in k's place and
// rethrown by the consumer when it reaches k; the epoch then ends. The threads
// belong to the epoch's iterator: when the loop finishes, throws, or is left
// early with break, the iterator's destruction stops the threads and joins them
// (a thread busy with a batch finishes that one batch first).
//
// § Note [Who owns the dataset]
// A loader reads its dataset on every epoch, so the dataset must live as long
// as the loader. Given an lvalue (`DataLoader loader(train, ...)`) the loader
// borrows it: `train` must outlive the loader, as a range-for's container must.
// Given an rvalue — a temporary `DataLoader loader(MyDataset(root), ...)` or
// `std::move(train)` — the loader takes it over (moved into a shared_ptr it
// holds), so the libtorch habit `make_data_loader(std::move(ds), options)` and
// the temporary both work; a borrowed temporary would dangle at the end of the
// statement. A std::shared_ptr<const Dataset> is shared. make_data_loader
// always owns its dataset (an lvalue is copied, as libtorch copies it) and its
// sampler, and returns a std::unique_ptr<DataLoader> to loop over with
// `for (auto& batch : *loader)`. A sampler the loader owns is told the epoch at
// each begin() (0, 1, ...); a borrowed sampler's set_epoch is the caller's.
// Read before: data/dataset.h, data/sampler.h. Read next: examples/ (training programs).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <type_traits>

#include "data/dataset.h"
#include "data/sampler.h"

namespace lockstep::data {

// Fluent options, like libtorch's: DataLoaderOptions(64).workers(2).drop_last(true).
class DataLoaderOptions {
 public:
  explicit DataLoaderOptions(int64_t batch_size) : batch_size_(batch_size) {}
  DataLoaderOptions() = default;  // batch_size 1, as libtorch's

  // libtorch's setter spelling: DataLoaderOptions().batch_size(64).workers(2).
  DataLoaderOptions batch_size(int64_t b) const { auto o = *this; o.batch_size_ = b; return o; }

  // Background loading threads; 0 loads on the caller's thread. Default 0.
  DataLoaderOptions workers(int64_t n) const { auto o = *this; o.workers_ = n; return o; }
  // Drop the last batch when it would be smaller than batch_size. Default false.
  DataLoaderOptions drop_last(bool d) const { auto o = *this; o.drop_last_ = d; return o; }
  // Without an explicit sampler: a RandomSampler (new order each epoch) instead of a
  // SequentialSampler. With an explicit sampler the sampler decides; setting shuffle is an error.
  DataLoaderOptions shuffle(bool s) const { auto o = *this; o.shuffle_ = s; return o; }
  // Seed of the loader's own RandomSampler (shuffle(true) without an explicit sampler).
  DataLoaderOptions seed(uint64_t s) const { auto o = *this; o.seed_ = s; return o; }
  // Batches each worker may load ahead of the consumer (PyTorch's prefetch_factor). Default 2.
  DataLoaderOptions prefetch(int64_t k) const { auto o = *this; o.prefetch_ = k; return o; }

  int64_t batch_size() const { return batch_size_; }
  int64_t workers() const { return workers_; }
  bool drop_last() const { return drop_last_; }
  bool shuffle() const { return shuffle_; }
  uint64_t seed() const { return seed_; }
  int64_t prefetch() const { return prefetch_; }

 private:
  int64_t batch_size_ = 1;
  int64_t workers_ = 0;
  bool drop_last_ = false;
  bool shuffle_ = false;
  uint64_t seed_ = 0;
  int64_t prefetch_ = 2;
};

namespace detail {
class EpochRun;  // one epoch's batches, threads and queue (data_loader.cpp)
}

class DataLoader {
 public:
  // An input iterator over one epoch's batches; it owns the loading threads.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = const Batch*;
    using reference = const Batch&;

    Iterator() = default;  // the end
    const Batch& operator*() const { return current_; }
    const Batch* operator->() const { return &current_; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return run_ == other.run_; }

   private:
    friend class DataLoader;
    explicit Iterator(std::shared_ptr<detail::EpochRun> run);
    std::shared_ptr<detail::EpochRun> run_;  // null at the end
    Batch current_;
  };

  // Reads `dataset` in the order of `sampler` (e.g. a DistributedSampler). Both
  // must outlive the loader's iteration; call sampler.set_epoch(e) before each epoch.
  // An lvalue dataset is borrowed (Note [Who owns the dataset]).
  DataLoader(const Dataset& dataset, DataLoaderOptions options, Sampler& sampler);
  // Uses its own SequentialSampler, or RandomSampler(seed) when options.shuffle(true);
  // the random order changes with every begin() (epoch 0, 1, ...).
  DataLoader(const Dataset& dataset, DataLoaderOptions options);
  // Shared ownership of the dataset.
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options, Sampler& sampler);
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);
  // Owned sampler: the loader sets its epoch at each begin() (make_data_loader uses it).
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options,
             std::unique_ptr<Sampler> sampler);
  // An rvalue dataset (a temporary, or std::move(ds)) is moved in and owned.
  template <class D>
    requires(std::derived_from<D, Dataset> && !std::is_reference_v<D>)
  DataLoader(D&& dataset, DataLoaderOptions options, Sampler& sampler)
      : DataLoader(std::shared_ptr<const Dataset>(std::make_shared<const D>(std::move(dataset))),
                   options, sampler) {}
  template <class D>
    requires(std::derived_from<D, Dataset> && !std::is_reference_v<D>)
  DataLoader(D&& dataset, DataLoaderOptions options)
      : DataLoader(std::shared_ptr<const Dataset>(std::make_shared<const D>(std::move(dataset))),
                   options) {}
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts an epoch: takes the sampler's indices and starts the workers.
  Iterator begin();
  Iterator end() const { return Iterator(); }

  int64_t size() const;  // batches per epoch
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }
  Sampler& sampler() const { return *sampler_; }

 private:
  std::shared_ptr<const Dataset> owned_dataset_;  // null when borrowed
  const Dataset* dataset_;
  DataLoaderOptions options_;
  std::unique_ptr<Sampler> owned_sampler_;
  Sampler* sampler_;
  int64_t epochs_started_ = 0;
};

// libtorch's spelling: an owning loader (Note [Who owns the dataset]).
//   auto loader = ls::data::make_data_loader(std::move(ds), DataLoaderOptions().batch_size(64));
//   for (auto& batch : *loader) { ... }
template <std::derived_from<Dataset> D>
std::unique_ptr<DataLoader> make_data_loader(D dataset, DataLoaderOptions options = DataLoaderOptions()) {
  return std::make_unique<DataLoader>(std::make_shared<const D>(std::move(dataset)), options);
}
template <std::derived_from<Dataset> D, std::derived_from<Sampler> S>
std::unique_ptr<DataLoader> make_data_loader(D dataset, S sampler,
                                             DataLoaderOptions options = DataLoaderOptions()) {
  return std::make_unique<DataLoader>(std::make_shared<const D>(std::move(dataset)), options,
                                      std::unique_ptr<Sampler>(std::make_unique<S>(std::move(sampler))));
}

// libtorch's other spellings: a batch size for the options, and the sampler as a
// template argument, built over the whole dataset (SequentialSampler(size) or
// RandomSampler(size)):
//   auto loader = make_data_loader<SequentialSampler>(std::move(ds), 64);
//   auto loader = make_data_loader(std::move(ds), sampler, 32);   // a DistributedSampler
// Unlike libtorch, a loader without a sampler goes in order (SequentialSampler)
// unless options.shuffle(true); libtorch's default sampler is a RandomSampler.
template <std::derived_from<Dataset> D>
std::unique_ptr<DataLoader> make_data_loader(D dataset, int64_t batch_size) {
  return make_data_loader(std::move(dataset), DataLoaderOptions(batch_size));
}
template <std::derived_from<Dataset> D, std::derived_from<Sampler> S>
std::unique_ptr<DataLoader> make_data_loader(D dataset, S sampler, int64_t batch_size) {
  return make_data_loader(std::move(dataset), std::move(sampler), DataLoaderOptions(batch_size));
}
template <std::derived_from<Sampler> S, std::derived_from<Dataset> D>
  requires std::constructible_from<S, int64_t>
std::unique_ptr<DataLoader> make_data_loader(D dataset, DataLoaderOptions options = DataLoaderOptions()) {
  S sampler(dataset.size());
  return make_data_loader(std::move(dataset), std::move(sampler), options);
}
template <std::derived_from<Sampler> S, std::derived_from<Dataset> D>
  requires std::constructible_from<S, int64_t>
std::unique_ptr<DataLoader> make_data_loader(D dataset, int64_t batch_size) {
  return make_data_loader<S>(std::move(dataset), DataLoaderOptions(batch_size));
}

}  // namespace lockstep::data
