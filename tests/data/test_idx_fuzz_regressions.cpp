// tests/data/test_idx_fuzz_regressions.cpp — IDX inputs found by fuzzing the
// reader (fuzz/fuzz_idx.cpp) and the API misuse next to them: each
// must be an ls::Error naming the file, never undefined behaviour.
// Read before: data/idx.h (Note [Validating IDX sizes]), tests/data/test_idx.cpp.
#include <doctest/doctest.h>

#include <string>

#include "core/error.h"
#include "data/idx.h"
#include "idx_files.h"

namespace ls = lockstep;
namespace lt = lockstep_test;

TEST_CASE("idx regression: a zero size beside sizes whose product overflows is refused") {
  // fuzz_idx's crash input: sizes (0, 0xfcffffff, 0xffffff07). Zero values, so
  // the old size check passed, but the tensor's strides multiply the other two
  // and overflowed int64 (UBSan: signed integer overflow in contiguous_strides).
  lt::TempDir dir;
  const std::vector<uint8_t> bytes = {0, 0, 8, 3, 0, 0, 0, 0, 0xfc, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x07};
  lt::write_plain(dir.file("crash"), bytes);
  CHECK_THROWS_WITH_AS(ls::data::read_idx(dir.file("crash"), 3), doctest::Contains("overflows"), ls::Error);
  const std::string path = dir.file("crash");
  CHECK_THROWS_WITH_AS(ls::data::read_idx(path, 3), doctest::Contains(path.c_str()), ls::Error);
  // A zero size with small other sizes is still a valid empty file.
  lt::write_plain(dir.file("empty"), lt::idx_file({0, 4000000000u, 3}, {}));
  const ls::Tensor t = ls::data::read_idx(dir.file("empty"), 3);
  CHECK(t.sizes() == ls::IntList{0, 4000000000LL, 3});
  CHECK(t.numel() == 0);
}

TEST_CASE("idx regression: a negative or oversized expected_dims is an error, not a huge header") {
  lt::TempDir dir;
  lt::write_plain(dir.file("l"), lt::idx_file({3}, {1, 2, 3}));
  CHECK_THROWS_WITH_AS(ls::data::read_idx(dir.file("l"), -1), doctest::Contains("expected_dims is -1"),
                       ls::Error);
  CHECK_THROWS_WITH_AS(ls::data::read_idx(dir.file("l"), 256), doctest::Contains("0 to 255 dims"),
                       ls::Error);
  CHECK(ls::data::read_idx(dir.file("l"), 1).numel() == 3);
}
