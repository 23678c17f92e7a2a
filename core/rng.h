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
#include <string>

namespace lockstep {

class Generator {
 public:
  explicit Generator(uint64_t seed = 5489u) : engine_(seed) {}
  void manual_seed(uint64_t seed);
  uint64_t next_u64();
  double uniform();         // [0, 1), 53 random bits
  double normal();          // standard normal
  std::mutex& mutex() { return mutex_; }  // held by factories while drawing a tensor

  // § Note [Generator state]
  // The whole state (the Mersenne Twister's 312 words and position, and the
  // Box-Muller spare) as text, so that a checkpoint can hold it: a Generator
  // given set_state(g.get_state()) draws exactly the numbers g draws next.
  // ls::get_rng_state() / ls::set_rng_state(t) (core/rng_state.h, PyTorch's
  // torch.get_rng_state) carry the same text as a uint8 tensor, for a state
  // dict. set_state checks the text and throws ls::Error on anything but
  // get_state's output.
  std::string get_state();
  void set_state(const std::string& state);

 private:
  std::mt19937_64 engine_;
  bool has_spare_normal_ = false;
  double spare_normal_ = 0.0;
  std::mutex mutex_;
};

Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace lockstep
