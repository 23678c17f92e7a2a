// examples/spirals.h — the examples' synthetic data set: two interleaved noisy spiral
// arms in the plane, one class each (train_demo, train_ddp). The points come from
// ls::randn, so they depend only on the seed set before the call (ls::manual_seed):
// every rank of a job that seeds alike builds the same data set.
// Read next: examples/train_demo.cpp, examples/train_ddp.cpp.
#pragma once

#include <cmath>
#include <numbers>
#include <utility>
#include <vector>

#include <lockstep.h>

namespace examples {

// n points per class on two interleaved spiral arms: inputs (2n, 2) float32 and one-hot
// targets (2n, 2); class c's points are rows c*n .. c*n + n - 1.
inline std::pair<lockstep::Tensor, lockstep::Tensor> make_spirals(int64_t n) {
  std::vector<float> xs, ys;
  lockstep::Tensor noise = lockstep::randn({2 * n, 2}) * 0.08;
  std::vector<float> eps = noise.to_vector<float>();
  for (int64_t c = 0; c < 2; ++c) {
    for (int64_t i = 0; i < n; ++i) {
      double r = 0.2 + 0.8 * static_cast<double>(i) / static_cast<double>(n);
      double angle = 3.0 * std::numbers::pi * r + c * std::numbers::pi;
      int64_t k = c * n + i;
      xs.push_back(static_cast<float>(r * std::cos(angle)) + eps[2 * k]);
      xs.push_back(static_cast<float>(r * std::sin(angle)) + eps[2 * k + 1]);
      ys.push_back(c == 0 ? 1.0f : 0.0f);
      ys.push_back(c == 1 ? 1.0f : 0.0f);
    }
  }
  return {lockstep::tensor(xs, {2 * n, 2}), lockstep::tensor(ys, {2 * n, 2})};
}

}  // namespace examples
