// data/synthetic.h — random datasets shaped like the paper's benchmarks, for
// measuring training speed without downloading ImageNet or Wikipedia.
//
// § Note [Synthetic examples are a function of (seed, index)]
// Example i is generated on demand from a Generator seeded with
// mix(seed, i) (splitmix64, see synthetic.cpp), so the dataset needs no memory
// for its examples, any index can be read in any order on any thread, and a
// given (seed, index) gives the same example on every rank and every run.
// Read before: data/dataset.h. Read next: data/sampler.h.
#pragma once

#include <cstdint>

#include "data/dataset.h"

namespace lockstep::data {

// ImageNet-shaped classification data: data (3, image_size, image_size) float32
// drawn from N(0, 1) (what normalised images roughly look like), target a 0-d
// int64 label uniform in [0, num_classes).
class SyntheticImageNet : public Dataset {
 public:
  explicit SyntheticImageNet(int64_t size, int64_t image_size = 224, int64_t num_classes = 1000,
                             uint64_t seed = 0);
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;  // fills the batch in place

  int64_t image_size() const { return image_size_; }
  int64_t num_classes() const { return num_classes_; }

 private:
  int64_t fill(int64_t index, float* image) const;  // writes one image, returns its label
  int64_t size_, image_size_, num_classes_;
  uint64_t seed_;
};

// BERT-style masked-language-model data. Each example is a sequence of
// seq_len token ids drawn uniformly from [0, vocab_size); each position is
// chosen for prediction with probability mask_prob. As in BERT, a chosen
// position's input is replaced by the [MASK] id 80% of the time, by a random
// token 10% of the time, and left unchanged 10% of the time.
//   data   (T) int64: the input ids after masking;
//   target (T) int64: the original id at chosen positions, -100 elsewhere
//                     (kIgnoreIndex, which cross_entropy skips).
// The [MASK] id is BERT's 103, or vocab_size - 1 for vocabularies smaller than 104.
class SyntheticMaskedLM : public Dataset {
 public:
  static constexpr int64_t kMaskTokenId = 103;
  static constexpr int64_t kIgnoreIndex = -100;

  SyntheticMaskedLM(int64_t size, int64_t seq_len, int64_t vocab_size, double mask_prob = 0.15,
                    uint64_t seed = 0);
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;

  int64_t seq_len() const { return seq_len_; }
  int64_t vocab_size() const { return vocab_size_; }
  int64_t mask_token_id() const { return mask_id_; }

 private:
  int64_t size_, seq_len_, vocab_size_;
  double mask_prob_;
  uint64_t seed_;
  int64_t mask_id_;
};

}  // namespace lockstep::data
