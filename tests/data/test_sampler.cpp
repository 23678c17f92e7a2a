// tests/data/test_sampler.cpp — permutation, SequentialSampler, RandomSampler and
// DistributedSampler against PyTorch's formulas (padding, drop_last, striding).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <set>

#include "core/error.h"
#include "data/sampler.h"

namespace ls = lockstep;
namespace ld = lockstep::data;

namespace {
bool is_permutation_of_range(std::vector<int64_t> v, int64_t n) {
  std::sort(v.begin(), v.end());
  std::vector<int64_t> range(static_cast<size_t>(n));
  std::iota(range.begin(), range.end(), int64_t{0});
  return v == range;
}

// torch.utils.data.DistributedSampler.__iter__ written out from its Python source,
// applied to a given global order.
std::vector<int64_t> torch_shard(std::vector<int64_t> indices, int64_t replicas, int64_t rank,
                                 bool drop_last) {
  const auto len = static_cast<int64_t>(indices.size());
  int64_t num_samples = 0;
  if (drop_last && len % replicas != 0) {
    num_samples = (len - replicas + replicas - 1) / replicas;  // ceil((len - R) / R)
    if (len < replicas) num_samples = 0;
  } else {
    num_samples = (len + replicas - 1) / replicas;
  }
  const int64_t total = num_samples * replicas;
  if (!drop_last) {
    const int64_t padding = total - len;
    std::vector<int64_t> repeated;
    while (static_cast<int64_t>(repeated.size()) < padding) {
      repeated.insert(repeated.end(), indices.begin(), indices.end());
    }
    indices.insert(indices.end(), repeated.begin(), repeated.begin() + padding);
  } else {
    indices.resize(static_cast<size_t>(total));
  }
  std::vector<int64_t> out;
  for (int64_t i = rank; i < total; i += replicas) out.push_back(indices[i]);
  return out;
}
}  // namespace

TEST_CASE("sampler: permutation(n, seed) is a seeded shuffle of 0..n-1") {
  CHECK(is_permutation_of_range(ld::permutation(100, 7), 100));
  CHECK(ld::permutation(100, 7) == ld::permutation(100, 7));
  CHECK(ld::permutation(100, 7) != ld::permutation(100, 8));
  CHECK(ld::permutation(0, 1).empty());
  CHECK(ld::permutation(1, 1) == std::vector<int64_t>{0});
  // Every value lands first about equally often over many seeds (4 values, 4000 seeds).
  std::array<int, 4> first{};
  for (uint64_t seed = 0; seed < 4000; ++seed) ++first[static_cast<size_t>(ld::permutation(4, seed)[0])];
  for (int count : first) {
    CHECK(count > 850);
    CHECK(count < 1150);
  }
}

TEST_CASE("sampler: SequentialSampler and RandomSampler") {
  ld::SequentialSampler seq(5);
  CHECK(seq.size() == 5);
  CHECK(seq.indices() == std::vector<int64_t>{0, 1, 2, 3, 4});
  ld::RandomSampler rnd(50, /*seed=*/3);
  CHECK(rnd.size() == 50);
  std::vector<int64_t> e0 = rnd.indices();
  CHECK(is_permutation_of_range(e0, 50));
  CHECK(rnd.indices() == e0);  // same epoch, same order
  rnd.set_epoch(1);
  CHECK(rnd.epoch() == 1);
  std::vector<int64_t> e1 = rnd.indices();
  CHECK(is_permutation_of_range(e1, 50));
  CHECK(e1 != e0);
  CHECK(e0 == ld::permutation(50, 3));  // documented: permutation(n, seed + epoch)
  CHECK(e1 == ld::permutation(50, 4));
  CHECK_THROWS_AS(ld::RandomSampler(-1), ls::Error);
}

TEST_CASE("sampler: DistributedSampler without shuffle pads by wrapping around, like PyTorch") {
  // 10 examples on 3 ranks: [0..9] + [0, 1], rank r takes every third from r.
  std::vector<std::vector<int64_t>> expected = {{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}};
  for (int64_t r = 0; r < 3; ++r) {
    ld::DistributedSampler s(10, 3, r, /*shuffle=*/false);
    CHECK(s.num_samples() == 4);
    CHECK(s.size() == 4);
    CHECK(s.total_size() == 12);
    CHECK(s.indices() == expected[static_cast<size_t>(r)]);
  }
  // Fewer examples than replicas: the list repeats as often as needed.
  std::vector<int64_t> got;
  for (int64_t r = 0; r < 5; ++r) {
    ld::DistributedSampler s(2, 5, r, false);
    CHECK(s.num_samples() == 1);
    got.push_back(s.indices().at(0));
  }
  CHECK(got == std::vector<int64_t>{0, 1, 0, 1, 0});
}

TEST_CASE("sampler: DistributedSampler drop_last truncates to floor(size / replicas)") {
  std::vector<std::vector<int64_t>> expected = {{0, 3, 6}, {1, 4, 7}, {2, 5, 8}};
  for (int64_t r = 0; r < 3; ++r) {
    ld::DistributedSampler s(10, 3, r, false, 0, /*drop_last=*/true);
    CHECK(s.num_samples() == 3);
    CHECK(s.indices() == expected[static_cast<size_t>(r)]);
  }
  ld::DistributedSampler tiny(2, 5, 4, false, 0, true);
  CHECK(tiny.num_samples() == 0);
  CHECK(tiny.indices().empty());
}

TEST_CASE("sampler: DistributedSampler sizes match PyTorch's formulas") {
  for (int64_t size : {0, 1, 2, 7, 10, 12, 13, 100, 101}) {
    for (int64_t replicas : {1, 2, 3, 4, 8}) {
      for (bool drop_last : {false, true}) {
        const int64_t torch_num_samples =
            drop_last && size % replicas != 0
                ? std::max<int64_t>(0, (size - replicas + replicas - 1) / replicas)
                : (size + replicas - 1) / replicas;
        ld::DistributedSampler s(size, replicas, replicas - 1, true, 5, drop_last);
        CAPTURE(size);
        CAPTURE(replicas);
        CAPTURE(drop_last);
        CHECK(s.num_samples() == torch_num_samples);
        CHECK(static_cast<int64_t>(s.indices().size()) == torch_num_samples);
      }
    }
  }
}

TEST_CASE("sampler: DistributedSampler shards are PyTorch's shards of one global permutation") {
  for (int64_t size : {12, 13, 3}) {
    for (bool drop_last : {false, true}) {
      const int64_t replicas = 4, epoch = 2;
      const uint64_t seed = 11;
      std::vector<int64_t> global = ld::permutation(size, seed + epoch);  // same on every rank
      std::multiset<int64_t> seen;
      for (int64_t r = 0; r < replicas; ++r) {
        ld::DistributedSampler s(size, replicas, r, true, seed, drop_last);
        s.set_epoch(epoch);
        std::vector<int64_t> mine = s.indices();
        CHECK(mine == torch_shard(global, replicas, r, drop_last));
        seen.insert(mine.begin(), mine.end());
      }
      CAPTURE(size);
      CAPTURE(drop_last);
      if (size % replicas == 0) {  // disjoint and covering exactly
        CHECK(seen.size() == static_cast<size_t>(size));
        CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == static_cast<size_t>(size));
      } else if (!drop_last) {  // every example at least once, a few twice
        CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == static_cast<size_t>(size));
        CHECK(seen.size() == static_cast<size_t>((size + replicas - 1) / replicas * replicas));
      } else {  // disjoint, the tail dropped
        CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == seen.size());
        CHECK(seen.size() == static_cast<size_t>(size / replicas * replicas));
      }
    }
  }
}

TEST_CASE("sampler: DistributedSampler epochs reorder, equal seed and epoch agree across ranks") {
  ld::DistributedSampler a(100, 2, 0, true, /*seed=*/1);
  ld::DistributedSampler b(100, 2, 0, true, /*seed=*/1);
  std::vector<int64_t> e0 = a.indices();
  CHECK(b.indices() == e0);  // a second process with the same arguments
  a.set_epoch(1);
  CHECK(a.indices() != e0);
  b.set_epoch(1);
  CHECK(b.indices() == a.indices());
  ld::DistributedSampler other_seed(100, 2, 0, true, /*seed=*/2);
  CHECK(other_seed.indices() != e0);
  // The two ranks of one epoch split the data between them.
  ld::DistributedSampler r0(100, 2, 0, true, 1), r1(100, 2, 1, true, 1);
  r0.set_epoch(3);
  r1.set_epoch(3);
  std::vector<int64_t> both = r0.indices();
  std::vector<int64_t> second = r1.indices();
  both.insert(both.end(), second.begin(), second.end());
  CHECK(is_permutation_of_range(both, 100));
}

TEST_CASE("sampler: DistributedSampler rejects bad arguments") {
  CHECK_THROWS_WITH_AS(ld::DistributedSampler(10, 0, 0), doctest::Contains("num_replicas must be >= 1"),
                       ls::Error);
  CHECK_THROWS_WITH_AS(ld::DistributedSampler(10, 2, 2), doctest::Contains("rank 2 is out of range [0, 2)"),
                       ls::Error);
  CHECK_THROWS_WITH_AS(ld::DistributedSampler(10, 2, -1), doctest::Contains("rank -1"), ls::Error);
  CHECK_THROWS_AS(ld::DistributedSampler(-5, 2, 0), ls::Error);
}
