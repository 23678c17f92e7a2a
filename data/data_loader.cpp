// data/data_loader.cpp — the epoch runner behind DataLoader's iterator: a
// bounded, ordered queue of batches filled by worker threads.
// See Note [DataLoader threads] in data/data_loader.h.
// Read before: data/data_loader.h. Read next: examples/.
#include "data/data_loader.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"

namespace lockstep::data {

namespace detail {

// One epoch: the batches' indices, the worker threads, and the ready batches by number.
class EpochRun {
 public:
  EpochRun(const Dataset& dataset, std::vector<std::vector<int64_t>> batches, int64_t workers,
           int64_t capacity)
      : dataset_(dataset), batches_(std::move(batches)), capacity_(capacity) {
    try {
      for (int64_t w = 0; w < workers; ++w) threads_.emplace_back([this] { worker_loop(); });
    } catch (...) {  // e.g. the system refused a thread: stop the ones already running
      stop_and_join();
      throw;
    }
  }

  ~EpochRun() { stop_and_join(); }
  EpochRun(const EpochRun&) = delete;
  EpochRun& operator=(const EpochRun&) = delete;

  // The next batch in order into `out`; false once the epoch is over. Rethrows
  // an exception that loading this batch threw, and ends the epoch.
  bool next(Batch& out) {
    const auto n = static_cast<int64_t>(batches_.size());
    if (next_to_yield_ >= n) return false;
    if (threads_.empty()) {  // workers(0): load right here
      const int64_t k = next_to_yield_++;
      try {
        out = dataset_.get_batch(batches_[k]);
      } catch (...) {
        next_to_yield_ = n;
        throw;
      }
      return true;
    }
    Loaded loaded;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_cv_.wait(lock, [&] { return ready_.count(next_to_yield_) > 0; });
      auto it = ready_.find(next_to_yield_);
      loaded = std::move(it->second);
      ready_.erase(it);
      ++next_to_yield_;
      if (loaded.error) {
        next_to_yield_ = n;
        stop_ = true;
      }
    }
    space_cv_.notify_all();  // a slot in the bounded queue is free (or we are stopping)
    if (loaded.error) std::rethrow_exception(loaded.error);
    out = std::move(loaded.batch);
    return true;
  }

 private:
  struct Loaded {
    Batch batch;
    std::exception_ptr error;
  };

  void worker_loop() {
    const auto n = static_cast<int64_t>(batches_.size());
    while (true) {
      int64_t k = 0;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        // Claim the next batch once the queue has room (see Note [DataLoader threads]).
        space_cv_.wait(lock, [&] {
          return stop_ || next_to_load_ >= n || next_to_load_ < next_to_yield_ + capacity_;
        });
        if (stop_ || next_to_load_ >= n) return;
        k = next_to_load_++;
      }
      Loaded loaded;
      try {
        loaded.batch = dataset_.get_batch(batches_[k]);
      } catch (...) {
        loaded.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ready_.emplace(k, std::move(loaded));
      }
      ready_cv_.notify_one();  // only the consumer waits here
    }
  }

  void stop_and_join() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    space_cv_.notify_all();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
    threads_.clear();
  }

  const Dataset& dataset_;
  const std::vector<std::vector<int64_t>> batches_;
  const int64_t capacity_;  // batches claimed by workers and not yet consumed, at most

  std::mutex mutex_;                   // guards everything below except threads_
  std::condition_variable space_cv_;   // workers wait for room in the queue
  std::condition_variable ready_cv_;   // the consumer waits for its next batch
  std::map<int64_t, Loaded> ready_;    // built batches by number, not yet consumed
  int64_t next_to_load_ = 0;           // next batch number a worker claims
  int64_t next_to_yield_ = 0;          // next batch number the consumer takes
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace detail

// ---- Iterator ----

DataLoader::Iterator::Iterator(std::shared_ptr<detail::EpochRun> run) : run_(std::move(run)) {
  ++*this;  // load the first batch (or reach the end of an empty epoch)
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  if (!run_) return *this;
  bool more = false;
  try {
    more = run_->next(current_);
  } catch (...) {
    run_.reset();  // stops and joins the workers
    current_ = {};
    throw;
  }
  if (!more) {
    run_.reset();
    current_ = {};
  }
  return *this;
}

// ---- DataLoader ----

namespace {
void check_options(const DataLoaderOptions& o) {
  LS_CHECK(o.batch_size() >= 1, "DataLoader: batch_size must be >= 1, got ", o.batch_size());
  LS_CHECK(o.workers() >= 0, "DataLoader: workers must be >= 0 (0 loads on the calling thread), got ",
           o.workers());
  LS_CHECK(o.prefetch() >= 1, "DataLoader: prefetch must be >= 1 batch per worker, got ",
           o.prefetch());
}
}  // namespace

DataLoader::DataLoader(const Dataset& dataset, DataLoaderOptions options, Sampler& sampler)
    : dataset_(&dataset), options_(options), sampler_(&sampler) {
  check_options(options_);
  LS_CHECK(!options_.shuffle(),
           "DataLoader: shuffle(true) cannot be combined with an explicit sampler; let the "
           "sampler shuffle (e.g. RandomSampler, or DistributedSampler with shuffle = true)");
}

DataLoader::DataLoader(const Dataset& dataset, DataLoaderOptions options)
    : dataset_(&dataset), options_(options) {
  check_options(options_);
  if (options_.shuffle()) {
    owned_sampler_ = std::make_unique<RandomSampler>(dataset.size(), options_.seed());
  } else {
    owned_sampler_ = std::make_unique<SequentialSampler>(dataset.size());
  }
  sampler_ = owned_sampler_.get();
}

namespace {
const Dataset& checked(const std::shared_ptr<const Dataset>& dataset) {
  LS_CHECK(dataset != nullptr, "DataLoader: the dataset pointer is null");
  return *dataset;
}
Sampler& checked(const std::unique_ptr<Sampler>& sampler) {
  LS_CHECK(sampler != nullptr, "DataLoader: the sampler pointer is null");
  return *sampler;
}
}  // namespace

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options,
                       Sampler& sampler)
    : DataLoader(checked(dataset), options, sampler) {
  owned_dataset_ = std::move(dataset);
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : DataLoader(checked(dataset), options) {
  owned_dataset_ = std::move(dataset);
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options,
                       std::unique_ptr<Sampler> sampler)
    : DataLoader(checked(dataset), options, checked(sampler)) {
  owned_dataset_ = std::move(dataset);
  owned_sampler_ = std::move(sampler);
}

DataLoader::~DataLoader() = default;

int64_t DataLoader::size() const {
  const int64_t n = sampler_->size();
  const int64_t b = options_.batch_size();
  return options_.drop_last() ? n / b : (n + b - 1) / b;
}

DataLoader::Iterator DataLoader::begin() {
  if (owned_sampler_) owned_sampler_->set_epoch(epochs_started_);
  ++epochs_started_;
  std::vector<int64_t> indices = sampler_->indices();
  const int64_t n = dataset_->size();
  for (int64_t i : indices) {
    LS_CHECK(i >= 0 && i < n, "DataLoader: the sampler yielded index ", i,
             " but the dataset has ", n, " examples; build the sampler with dataset.size()");
  }
  // Cut the epoch into batches of batch_size; the tail is a smaller batch unless drop_last.
  const auto b = static_cast<size_t>(options_.batch_size());
  std::vector<std::vector<int64_t>> batches;
  for (size_t start = 0; start < indices.size(); start += b) {
    const size_t end = std::min(indices.size(), start + b);
    if (end - start < b && options_.drop_last()) break;
    batches.emplace_back(indices.begin() + static_cast<std::ptrdiff_t>(start),
                         indices.begin() + static_cast<std::ptrdiff_t>(end));
  }
  const int64_t workers = options_.workers();
  return Iterator(std::make_shared<detail::EpochRun>(*dataset_, std::move(batches), workers,
                                                     options_.prefetch() * workers));
}

}  // namespace lockstep::data
