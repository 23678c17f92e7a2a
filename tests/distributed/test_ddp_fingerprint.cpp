// tests/distributed/test_ddp_fingerprint.cpp — the pure parts of the DDP
// iteration fingerprint (Note [DDP iteration fingerprint]): the bucket layout
// hash and the error text for disagreeing ranks. The exchange itself, with real
// ranks, is tested in tests/distributed/test_ddp_misuse.cpp.
// Read before: distributed/ddp/ddp_fingerprint.h.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/native/native.h"
#include "distributed/ddp/ddp_fingerprint.h"
#include "tests/support/errors.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using dist::detail::DDPPhase;
using dist::detail::IterationState;

namespace {

using lockstep::testing::contains;

IterationState at(DDPPhase phase, int64_t forwards, int64_t backwards) {
  IterationState s;
  s.phase = phase;
  s.forwards = forwards;
  s.backwards = backwards;
  s.layout_hash = 42;
  s.num_buckets = 2;
  s.num_elements = 100;
  return s;
}

// A bucket holding parameters `indices` with the given lengths, of `dtype`.
dist::Bucket bucket(std::vector<size_t> indices, std::vector<int64_t> lengths, ls::ScalarType dtype = ls::kFloat32) {
  dist::Bucket b;
  int64_t total = 0;
  for (int64_t n : lengths) {
    b.offsets.push_back(total);
    total += n;
  }
  b.param_indices = std::move(indices);
  b.lengths = std::move(lengths);
  b.flat = ls::native::zeros({total}, dtype);
  return b;
}

}  // namespace

TEST_CASE("ddp fingerprint: agreeing ranks give no message") {
  std::vector<IterationState> all(4, at(DDPPhase::BACKWARD, 7, 7));
  CHECK(dist::detail::describe_disagreement(all, 2).empty());
  IterationState s = at(DDPPhase::FORWARD, 3, 2);
  CHECK(IterationState::unpack(s.pack().data()) == s);
}

TEST_CASE("ddp fingerprint: a rank in its next forward is named as having skipped a backward") {
  std::vector<IterationState> all(4, at(DDPPhase::BACKWARD, 4, 4));
  all[3] = at(DDPPhase::FORWARD, 5, 3);
  std::string msg = dist::detail::describe_disagreement(all, 1);
  CHECK_MESSAGE(contains(msg, "DDP (rank 1): the ranks disagree"), msg);
  CHECK_MESSAGE(contains(msg, "ranks 0, 1, 2: in backward #4, after 4 synced forward(s); "
                              "rank 3: starting forward #5, after 3 synced backward(s)."), msg);
  CHECK_MESSAGE(contains(msg, "Likely cause: rank 3 ran 1 more synced forward(s) whose backward never ran "
                              "than ranks 0, 1, 2"), msg);
  CHECK_MESSAGE(!contains(msg, "bucket layouts differ"), msg);
}

TEST_CASE("ddp fingerprint: ranks at different iterations without a skipped backward are told so") {
  std::vector<IterationState> all = {at(DDPPhase::BACKWARD, 4, 4), at(DDPPhase::BACKWARD, 5, 5)};
  std::string msg = dist::detail::describe_disagreement(all, 0);
  CHECK_MESSAGE(contains(msg, "rank 0: in backward #4, after 4 synced forward(s); rank 1: in backward #5"), msg);
  CHECK_MESSAGE(contains(msg, "ran different numbers of iterations"), msg);
  CHECK_MESSAGE(!contains(msg, "skipped a backward"), msg);
}

TEST_CASE("ddp fingerprint: a different bucket layout is reported with each side's bucket count") {
  std::vector<IterationState> all(3, at(DDPPhase::BACKWARD, 1, 1));
  all[2].layout_hash = 43;
  all[2].num_buckets = 5;
  std::string msg = dist::detail::describe_disagreement(all, 2);
  CHECK_MESSAGE(contains(msg, "The gradient bucket layouts differ: ranks 0, 1: 2 bucket(s) of 100 elements"), msg);
  CHECK_MESSAGE(contains(msg, "rank 2: 5 bucket(s) of 100 elements"), msg);
  CHECK_MESSAGE(contains(msg, "bucket_cap_mb / first_bucket_mb"), msg);
  CHECK_MESSAGE(!contains(msg, "in backward #"), msg);  // positions agree: not listed
}

TEST_CASE("ddp fingerprint: the layout hash changes with membership, sizes and dtype") {
  const std::vector<dist::Bucket> base = {bucket({3, 2}, {10, 20}), bucket({1, 0}, {5, 5})};
  const int64_t h = dist::detail::bucket_layout_hash(base);
  CHECK(h == dist::detail::bucket_layout_hash({bucket({3, 2}, {10, 20}), bucket({1, 0}, {5, 5})}));
  // Parameter 1 moved to the first bucket: same parameters, same total size.
  CHECK(h != dist::detail::bucket_layout_hash({bucket({3, 2, 1}, {10, 20, 5}), bucket({0}, {5})}));
  CHECK(h != dist::detail::bucket_layout_hash({bucket({3, 2}, {10, 21}), bucket({1, 0}, {5, 5})}));
  CHECK(h != dist::detail::bucket_layout_hash({bucket({3, 2}, {10, 20}), bucket({1, 0}, {5, 5}, ls::kFloat64)}));
  CHECK(h != dist::detail::bucket_layout_hash({bucket({2, 3}, {20, 10}), bucket({1, 0}, {5, 5})}));
}
