// core/rng.h — random number generation, reproducible for a seed.
//
// One default Generator (a 64-bit Mersenne Twister) feeds randn/rand/
// randint/bernoulli/randperm and dropout; manual_seed(s) resets it, so a
// program that seeds first draws the same numbers on every run and on every
// rank. Normal samples use the Box-Muller transform, written out here so the
// stream does not depend on the standard library's implementation.
// Read before: core/factory.h. Read next: core/printing.cpp.
#pragma once

#include <cstdint>
#include <mutex>
#include <random>

namespace lockstep {

class Generator {
 public:
  explicit Generator(uint64_t seed = 5489u) : engine_(seed) {}
  void manual_seed(uint64_t seed);
  uint64_t next_u64();
  double uniform();         // [0, 1), 53 random bits
  double normal();          // standard normal
  std::mutex& mutex() { return mutex_; }  // held by factories while drawing a tensor

 private:
  std::mt19937_64 engine_;
  bool has_spare_normal_ = false;
  double spare_normal_ = 0.0;
  std::mutex mutex_;
};

Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace lockstep
