// data/synthetic.cpp — SyntheticImageNet and SyntheticMaskedLM; see
// Note [Synthetic examples are a function of (seed, index)].
// Read before: data/synthetic.h. Read next: data/data_loader.cpp.
#include "data/synthetic.h"

#include <algorithm>

#include "core/error.h"
#include "core/native/native.h"
#include "core/rng.h"

namespace lockstep::data {

namespace {
// splitmix64's finaliser: nearby (seed, index) pairs give unrelated generator seeds.
uint64_t mix(uint64_t seed, int64_t index) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index) + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, bound), bound >= 1 (53-bit resolution is plenty for class and token ids).
int64_t draw_below(Generator& gen, int64_t bound) {
  return std::min(bound - 1, static_cast<int64_t>(gen.uniform() * static_cast<double>(bound)));
}

void check_index(int64_t index, int64_t size, const char* who) {
  LS_CHECK(index >= 0 && index < size, who, ": index ", index,
           " is out of range for a dataset of ", size, " examples");
}
}  // namespace

// ---- SyntheticImageNet ----

SyntheticImageNet::SyntheticImageNet(int64_t size, int64_t image_size, int64_t num_classes,
                                     uint64_t seed)
    : size_(size), image_size_(image_size), num_classes_(num_classes), seed_(seed) {
  LS_CHECK(size >= 0 && image_size >= 1 && num_classes >= 1,
           "SyntheticImageNet: need size >= 0, image_size >= 1 and num_classes >= 1, got size ",
           size, ", image_size ", image_size, ", num_classes ", num_classes);
}

int64_t SyntheticImageNet::fill(int64_t index, float* image) const {
  check_index(index, size_, "SyntheticImageNet");
  Generator gen(mix(seed_, index));
  const int64_t label = draw_below(gen, num_classes_);
  const int64_t n = 3 * image_size_ * image_size_;
  for (int64_t i = 0; i < n; ++i) image[i] = static_cast<float>(gen.normal());
  return label;
}

Example SyntheticImageNet::get(int64_t index) const {
  Tensor image = native::empty({3, image_size_, image_size_}, kFloat32);  // (3, H, W)
  Tensor label = native::empty({}, kInt64);                              // 0-d
  *label.data_ptr<int64_t>() = fill(index, image.data_ptr<float>());
  return {image, label};
}

Batch SyntheticImageNet::get_batch(const std::vector<int64_t>& indices) const {
  const auto b = static_cast<int64_t>(indices.size());
  Tensor images = native::empty({b, 3, image_size_, image_size_}, kFloat32);  // (B, 3, H, W)
  Tensor labels = native::empty({b}, kInt64);                                // (B)
  const int64_t per_image = 3 * image_size_ * image_size_;
  for (int64_t i = 0; i < b; ++i) {
    labels.data_ptr<int64_t>()[i] = fill(indices[i], images.data_ptr<float>() + i * per_image);
  }
  return {images, labels};
}

// ---- SyntheticMaskedLM ----

SyntheticMaskedLM::SyntheticMaskedLM(int64_t size, int64_t seq_len, int64_t vocab_size,
                                     double mask_prob, uint64_t seed)
    : size_(size),
      seq_len_(seq_len),
      vocab_size_(vocab_size),
      mask_prob_(mask_prob),
      seed_(seed),
      mask_id_(std::min(kMaskTokenId, vocab_size - 1)) {
  LS_CHECK(size >= 0 && seq_len >= 1 && vocab_size >= 1,
           "SyntheticMaskedLM: need size >= 0, seq_len >= 1 and vocab_size >= 1, got size ", size,
           ", seq_len ", seq_len, ", vocab_size ", vocab_size);
  LS_CHECK(mask_prob >= 0.0 && mask_prob <= 1.0,
           "SyntheticMaskedLM: mask_prob must be in [0, 1], got ", mask_prob);
}

Example SyntheticMaskedLM::get(int64_t index) const {
  check_index(index, size_, "SyntheticMaskedLM");
  Generator gen(mix(seed_, index));
  Tensor input = native::empty({seq_len_}, kInt64);   // (T)
  Tensor target = native::empty({seq_len_}, kInt64);  // (T)
  int64_t* in = input.data_ptr<int64_t>();
  int64_t* tgt = target.data_ptr<int64_t>();
  for (int64_t t = 0; t < seq_len_; ++t) {
    const int64_t token = draw_below(gen, vocab_size_);
    in[t] = token;
    tgt[t] = kIgnoreIndex;
    if (gen.uniform() >= mask_prob_) continue;
    tgt[t] = token;  // predict the original token here
    const double r = gen.uniform();
    if (r < 0.8) {
      in[t] = mask_id_;
    } else if (r < 0.9) {
      in[t] = draw_below(gen, vocab_size_);
    }  // else: the token stays as it was
  }
  return {input, target};
}

}  // namespace lockstep::data
