// data/sampler.cpp — permutation, SequentialSampler, RandomSampler, DistributedSampler.
// Read before: data/sampler.h (Notes [Sampler permutations] and
// [DistributedSampler semantics]). Read next: data/data_loader.cpp.
#include "data/sampler.h"

#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/rng.h"

namespace lockstep::data {

namespace {
// A uniform draw from [0, bound) without modulo bias: reject the top sliver of
// the 64-bit range that does not split evenly into `bound` buckets.
uint64_t bounded(Generator& gen, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x = gen.next_u64();
  while (x >= limit) x = gen.next_u64();
  return x % bound;
}

void check_size(int64_t n, const char* who) {
  LS_CHECK(n >= 0, who, ": the dataset size must be >= 0, got ", n);
}
}  // namespace

std::vector<int64_t> permutation(int64_t n, uint64_t seed) {
  check_size(n, "permutation");
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  Generator gen(seed);  // private: never touches the default generator
  for (int64_t i = n - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(bounded(gen, static_cast<uint64_t>(i) + 1));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

SequentialSampler::SequentialSampler(int64_t n) : n_(n) { check_size(n, "SequentialSampler"); }

std::vector<int64_t> SequentialSampler::indices() const {
  std::vector<int64_t> out(static_cast<size_t>(n_));
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  check_size(n, "RandomSampler");
}

std::vector<int64_t> RandomSampler::indices() const {
  return permutation(n_, seed_ + static_cast<uint64_t>(epoch_));
}

DistributedSampler::DistributedSampler(int64_t size, int64_t num_replicas, int64_t rank,
                                       bool shuffle, uint64_t seed, bool drop_last)
    : dataset_size_(size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  check_size(size, "DistributedSampler");
  LS_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas must be >= 1, got ",
           num_replicas, " (pass the world size, e.g. pg->size())");
  LS_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank,
           " is out of range [0, ", num_replicas, "); pass this process's rank, e.g. pg->rank()");
  // See Note [DistributedSampler semantics]; PyTorch writes the drop_last case as
  // ceil((size - R) / R), which equals floor(size / R) when R does not divide size.
  num_samples_ = drop_last ? size / num_replicas : (size + num_replicas - 1) / num_replicas;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all;
  if (shuffle_) {
    all = permutation(dataset_size_, seed_ + static_cast<uint64_t>(epoch_));
  } else {
    all.resize(static_cast<size_t>(dataset_size_));
    std::iota(all.begin(), all.end(), int64_t{0});
  }
  const auto total = static_cast<size_t>(total_size());
  if (all.size() < total) {
    // Pad by repeating the list from its start, as many times as needed.
    const size_t n = all.size();  // > 0 here: total > 0 needs size > 0
    all.reserve(total);
    for (size_t i = 0; all.size() < total; ++i) all.push_back(all[i % n]);
  } else {
    all.resize(total);  // drop_last: the tail that does not fill a round is dropped
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (size_t i = static_cast<size_t>(rank_); i < total; i += static_cast<size_t>(num_replicas_)) {
    mine.push_back(all[i]);
  }
  return mine;
}

}  // namespace lockstep::data
