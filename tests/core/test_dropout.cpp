// tests/core/test_dropout.cpp — native::dropout_forward / dropout_backward.
//
// Kept elements are scaled by exactly 1 / (1 - p) and dropped ones are zero; the
// fraction dropped is close to p (a binomial bound that fails with probability
// far below 1e-6); the same seed gives the same mask; p == 1 gives zeros, p
// outside [0, 1] an error; backward multiplies by the same mask / (1 - p).
// Read before: core/native/dropout.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "core/native/nn_kernels_transformer.h"
#include "core/parallel.h"
#include "core/rng.h"

namespace ls = lockstep;
namespace native = lockstep::native;
using ls::Tensor;

TEST_CASE("dropout: survivors are scaled by 1 / (1 - p) and about p of them drop") {
  ls::manual_seed(21);
  const int64_t n = 20000;
  const double p = 0.3;
  Tensor x = ls::uniform({n}, 1.0, 2.0, ls::kFloat64);
  auto [y, mask] = native::dropout_forward(x, p);
  CHECK(y.sizes() == x.sizes());
  CHECK(mask.dtype() == ls::kBool);
  const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  const std::vector<bool> kept = [&] {
    std::vector<bool> k;
    for (uint8_t v : mask.to_vector<uint8_t>()) k.push_back(v != 0);
    return k;
  }();
  int64_t dropped = 0, wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double expected = kept[i] ? xv[i] / (1 - p) : 0.0;
    wrong += std::abs(yv[i] - expected) > 1e-15 * std::abs(expected);
    dropped += !kept[i];
  }
  CHECK(wrong == 0);
  // Binomial(n, p): std = sqrt(n p (1 - p)) ~ 65; 6 std devs ~ 390.
  const double sd = std::sqrt(n * p * (1 - p));
  CHECK(std::abs(static_cast<double>(dropped) - n * p) < 6 * sd);
}

TEST_CASE("dropout: the same seed gives the same mask, another seed a different one") {
  Tensor x = ls::ones({64});
  ls::manual_seed(7);
  auto [y1, m1] = native::dropout_forward(x, 0.5);
  ls::manual_seed(7);
  auto [y2, m2] = native::dropout_forward(x, 0.5);
  ls::manual_seed(8);
  auto [y3, m3] = native::dropout_forward(x, 0.5);
  CHECK(native::equal(m1, m2));
  CHECK(native::equal(y1, y2));
  CHECK_FALSE(native::equal(m1, m3));  // equal with probability 2^-64
}

TEST_CASE("dropout: backward multiplies by the forward's mask / (1 - p)") {
  ls::manual_seed(22);
  Tensor x = ls::randn({4, 5});
  auto [y, mask] = native::dropout_forward(x, 0.25);
  Tensor g = ls::randn({4, 5});
  Tensor dx = native::dropout_backward(g, mask, 0.25);
  const std::vector<float> gv = g.to_vector<float>(), dxv = dx.to_vector<float>();
  const std::vector<uint8_t> kv = mask.to_vector<uint8_t>();
  for (size_t i = 0; i < gv.size(); ++i) {
    CHECK(dxv[i] == doctest::Approx(kv[i] ? gv[i] / 0.75 : 0.0));
  }
}

TEST_CASE("dropout: p == 1 zeroes everything, p outside [0, 1] is an error") {
  auto [y, mask] = native::dropout_forward(ls::ones({10}), 1.0);
  for (float v : y.to_vector<float>()) CHECK(v == 0.0f);
  for (float v : native::dropout_backward(ls::ones({10}), mask, 1.0).to_vector<float>()) {
    CHECK(v == 0.0f);
  }
  CHECK_THROWS_WITH_AS(native::dropout_forward(ls::ones({3}), 1.5),
                       doctest::Contains("dropout: dropout probability has to be between 0 and 1, "
                                         "but got 1.5"),
                       ls::Error);
  CHECK_THROWS_WITH_AS(native::dropout_forward(ls::ones({3}), -0.1),
                       doctest::Contains("between 0 and 1"), ls::Error);
  CHECK_THROWS_WITH_AS(native::dropout_forward(ls::ones({3}, ls::kInt64), 0.5),
                       doctest::Contains("dropout: expected a floating input"), ls::Error);
}

TEST_CASE("dropout: the mask does not depend on the thread count, and p == 0 keeps everything") {
  // See Note [Counter-based dropout masks]: element i's draw depends only on (key, i).
  Tensor x = ls::randn({100000});
  const int saved = ls::get_num_threads();
  ls::set_num_threads(1);
  ls::manual_seed(3);
  auto [y1, m1] = native::dropout_forward(x, 0.3);
  ls::set_num_threads(2);
  ls::manual_seed(3);
  auto [y2, m2] = native::dropout_forward(x, 0.3);
  ls::set_num_threads(saved);
  CHECK(native::equal(m1, m2));
  CHECK(native::equal(y1, y2));
  auto [y0, m0] = native::dropout_forward(x, 0.0);
  CHECK(native::equal(y0, x));
  CHECK(m0.sum().item<int64_t>() == x.numel());
}

TEST_CASE("dropout: consecutive calls draw different masks and neighbours are uncorrelated") {
  ls::manual_seed(11);
  Tensor x = ls::ones({200000});
  auto [y1, m1] = native::dropout_forward(x, 0.5);
  auto [y2, m2] = native::dropout_forward(x, 0.5);
  CHECK_FALSE(native::equal(m1, m2));
  // Adjacent pairs both kept: 1/4 of pairs for independent draws; sd = sqrt(n * 3/16).
  const auto k = m1.to(ls::kUInt8).to_vector<uint8_t>();
  int64_t both = 0;
  for (size_t i = 0; i + 1 < k.size(); i += 2) both += (k[i] && k[i + 1]) ? 1 : 0;
  const double n = static_cast<double>(k.size() / 2);
  CHECK(std::abs(static_cast<double>(both) - n / 4) < 6 * std::sqrt(n * 3.0 / 16.0));
}
