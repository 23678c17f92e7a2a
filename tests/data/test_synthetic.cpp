// tests/data/test_synthetic.cpp — SyntheticImageNet and SyntheticMaskedLM:
// shapes, determinism per (seed, index), value distributions, BERT masking.
#include <doctest/doctest.h>

#include <cmath>

#include "core/error.h"
#include "core/native/native.h"
#include "data/synthetic.h"

namespace ls = lockstep;
namespace ld = lockstep::data;

TEST_CASE("synthetic: ImageNet-shaped examples are a function of (seed, index)") {
  ld::SyntheticImageNet ds(1000, /*image_size=*/16, /*num_classes=*/10, /*seed=*/5);
  CHECK(ds.size() == 1000);
  ld::Example a = ds.get(7);
  CHECK(a.data.sizes() == ls::IntList{3, 16, 16});
  CHECK(a.data.dtype() == ls::kFloat32);
  CHECK(a.target.dim() == 0);
  CHECK(a.target.dtype() == ls::kInt64);
  ld::Example again = ds.get(7);
  CHECK(ls::native::equal(a.data, again.data));
  CHECK(a.target.item<int64_t>() == again.target.item<int64_t>());
  CHECK_FALSE(ls::native::equal(a.data, ds.get(8).data));
  ld::SyntheticImageNet other_seed(1000, 16, 10, 6);
  CHECK_FALSE(ls::native::equal(a.data, other_seed.get(7).data));
  // get_batch writes the same examples straight into the batch.
  ld::Batch b = ds.get_batch({7, 3, 7});
  CHECK(b.data.sizes() == ls::IntList{3, 3, 16, 16});
  CHECK(ls::native::equal(ls::native::select(b.data, 0, 0), a.data));
  CHECK(ls::native::equal(ls::native::select(b.data, 0, 1), ds.get(3).data));
  CHECK(b.target.to_vector<int64_t>() ==
        std::vector<int64_t>{a.target.item<int64_t>(), ds.get(3).target.item<int64_t>(),
                             a.target.item<int64_t>()});
  CHECK_THROWS_WITH_AS(ds.get(1000), doctest::Contains("index 1000 is out of range"), ls::Error);
}

TEST_CASE("synthetic: ImageNet pixels look standard normal and labels cover the classes") {
  ld::SyntheticImageNet ds(200, 8, 4, 1);
  std::vector<int64_t> indices(200);
  for (int64_t i = 0; i < 200; ++i) indices[static_cast<size_t>(i)] = i;
  ld::Batch all = ds.get_batch(indices);  // (200, 3, 8, 8): 38400 values
  const double mean = ls::native::mean(all.data, {}, false).item<double>();
  const double mean_sq =
      ls::native::mean(ls::native::binary(ls::native::BinaryOp::Mul, all.data, all.data), {}, false)
          .item<double>();
  CHECK(std::abs(mean) < 0.03);
  CHECK(std::abs(mean_sq - 1.0) < 0.05);
  std::vector<int64_t> histogram(4, 0);
  for (int64_t label : all.target.to_vector<int64_t>()) {
    REQUIRE(label >= 0);
    REQUIRE(label < 4);
    ++histogram[static_cast<size_t>(label)];
  }
  for (int64_t count : histogram) CHECK(count > 25);  // ~50 each
}

TEST_CASE("synthetic: masked-LM targets are -100 except at masked positions") {
  const int64_t T = 64, V = 1000;
  ld::SyntheticMaskedLM ds(200, T, V, 0.15, 3);
  CHECK(ds.mask_token_id() == 103);
  int64_t chosen = 0, as_mask = 0, kept = 0;
  for (int64_t i = 0; i < ds.size(); ++i) {
    ld::Example ex = ds.get(i);
    REQUIRE(ex.data.sizes() == ls::IntList{T});
    REQUIRE(ex.target.sizes() == ls::IntList{T});
    REQUIRE(ex.data.dtype() == ls::kInt64);
    REQUIRE(ex.target.dtype() == ls::kInt64);
    std::vector<int64_t> in = ex.data.to_vector<int64_t>();
    std::vector<int64_t> tgt = ex.target.to_vector<int64_t>();
    for (int64_t t = 0; t < T; ++t) {
      const auto k = static_cast<size_t>(t);
      REQUIRE(in[k] >= 0);
      REQUIRE(in[k] < V);
      if (tgt[k] == ld::SyntheticMaskedLM::kIgnoreIndex) continue;
      REQUIRE(tgt[k] >= 0);
      REQUIRE(tgt[k] < V);
      ++chosen;
      if (in[k] == 103) ++as_mask;
      if (in[k] == tgt[k]) ++kept;
    }
  }
  const double positions = 200.0 * T;
  CHECK(chosen / positions == doctest::Approx(0.15).epsilon(0.1));   // 15% +- 1.5 points
  CHECK(as_mask / double(chosen) == doctest::Approx(0.8).epsilon(0.06));
  CHECK(kept / double(chosen) == doctest::Approx(0.1).epsilon(0.35));  // 10% unchanged (+ rare random hits)
  // Deterministic per index.
  CHECK(ls::native::equal(ds.get(11).data, ds.get(11).data));
  CHECK(ls::native::equal(ds.get(11).target, ds.get(11).target));
  CHECK_FALSE(ls::native::equal(ds.get(11).data, ds.get(12).data));
}

TEST_CASE("synthetic: masked-LM edge cases and argument checks") {
  ld::SyntheticMaskedLM none(5, 16, 30, 0.0);
  ld::SyntheticMaskedLM all(5, 16, 30, 1.0);
  CHECK(none.mask_token_id() == 29);  // 103 clipped to the vocabulary
  for (int64_t i = 0; i < 5; ++i) {
    for (int64_t t : none.get(i).target.to_vector<int64_t>()) CHECK(t == -100);
    for (int64_t t : all.get(i).target.to_vector<int64_t>()) CHECK(t >= 0);
  }
  CHECK_THROWS_WITH_AS(ld::SyntheticMaskedLM(5, 16, 30, 1.5), doctest::Contains("mask_prob"),
                       ls::Error);
  CHECK_THROWS_AS(ld::SyntheticMaskedLM(5, 0, 30), ls::Error);
  CHECK_THROWS_AS(ld::SyntheticImageNet(5, 0), ls::Error);
}
