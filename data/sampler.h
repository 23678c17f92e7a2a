// data/sampler.h — which example indices an epoch visits, and in what order.
//
// A Sampler hands the DataLoader the list of dataset indices for the current
// epoch (like torch.utils.data.Sampler). SequentialSampler visits 0..n-1;
// RandomSampler a fresh permutation each epoch; DistributedSampler gives each
// of `num_replicas` ranks its own shard with PyTorch's exact padding and
// striding rules (see Note [DistributedSampler semantics]).
//
// § Note [Sampler permutations]
// Shuffles come from permutation(n, seed): a Fisher–Yates shuffle driven by a
// lockstep::Generator (std::mt19937_64, whose output the C++ standard fixes)
// with unbiased bounded draws written out in sampler.cpp. So the order is a
// pure function of (n, seed): the same on every rank, platform and run. It does
// not match torch.randperm bit for bit — only the semantics around it do.
// Read before: data/dataset.h. Read next: data/data_loader.h.
#pragma once

#include <cstdint>
#include <vector>

namespace lockstep::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The indices of the current epoch, in visiting order; size() of them.
  virtual std::vector<int64_t> indices() const = 0;
  virtual int64_t size() const = 0;
  // Selects the epoch; samplers that shuffle derive their order from it.
  virtual void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

 protected:
  int64_t epoch_ = 0;
};

// A permutation of [0, n) that depends only on (n, seed); see Note [Sampler permutations].
std::vector<int64_t> permutation(int64_t n, uint64_t seed);

// 0, 1, ..., n-1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

// permutation(n, seed + epoch): a new order each epoch, reproducible for a seed.
class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(int64_t n, uint64_t seed = 0);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

// § Note [DistributedSampler semantics]
// As torch.utils.data.DistributedSampler, for a dataset of `size` examples and
// R = num_replicas:
//   indices     = shuffle ? permutation(size, seed + epoch) : [0, size)
//   num_samples = drop_last ? floor(size / R) : ceil(size / R)
//   total_size  = num_samples * R
//   !drop_last: pad `indices` to total_size by appending its own head again,
//               repeating the whole list as often as needed (size < R);
//   drop_last:  truncate `indices` to total_size;
//   rank r takes indices[r : total_size : R] (a stride, not a block).
// Every rank builds the same global list (same seed and epoch), so the shards
// are disjoint and, without padding, cover the dataset exactly. Call
// set_epoch(e) on every rank before each epoch, or every epoch repeats epoch 0.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t size, int64_t num_replicas, int64_t rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);
  std::vector<int64_t> indices() const override;  // this rank's num_samples() indices
  int64_t size() const override { return num_samples_; }
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }
  int64_t num_replicas() const { return num_replicas_; }
  int64_t rank() const { return rank_; }

 private:
  int64_t dataset_size_;
  int64_t num_replicas_;
  int64_t rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t num_samples_;
};

}  // namespace lockstep::data
