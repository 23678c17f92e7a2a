// core/rng.cpp — the default generator, uniform and normal draws.
// Read before: core/rng.h.
#include "core/rng.h"

#include <cmath>
#include <numbers>

namespace lockstep {

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  engine_.seed(seed);
  has_spare_normal_ = false;
}

uint64_t Generator::next_u64() { return engine_(); }

double Generator::uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

double Generator::normal() {
  if (has_spare_normal_) {
    has_spare_normal_ = false;
    return spare_normal_;
  }
  // Box-Muller: two uniforms -> two independent standard normals.
  double u1 = 1.0 - uniform();  // (0, 1], so log(u1) is finite
  double u2 = uniform();
  double radius = std::sqrt(-2.0 * std::log(u1));
  double angle = 2.0 * std::numbers::pi * u2;
  spare_normal_ = radius * std::sin(angle);
  has_spare_normal_ = true;
  return radius * std::cos(angle);
}

Generator& default_generator() {
  static Generator generator;
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace lockstep
