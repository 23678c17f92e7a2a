// tests/data/test_idx.cpp — the IDX reader: plain and gzipped files, and every
// kind of corrupt header or payload rejected with a message naming the file.
#include <doctest/doctest.h>

#include <iterator>

#include "core/error.h"
#include "data/idx.h"
#include "idx_files.h"

namespace ls = lockstep;
namespace lt = lockstep_test;

TEST_CASE("idx: reads a plain 3-d file with its sizes and bytes") {
  lt::TempDir dir;
  const std::vector<uint8_t> payload = lt::pattern(2 * 3 * 4);
  lt::write_plain(dir.file("a-idx3-ubyte"), lt::idx_file({2, 3, 4}, payload));
  ls::Tensor t = ls::data::read_idx(dir.file("a-idx3-ubyte"), 3);
  CHECK(t.dtype() == ls::kUInt8);
  CHECK(t.sizes() == ls::IntList{2, 3, 4});
  CHECK(t.to_vector<uint8_t>() == payload);
}

TEST_CASE("idx: reads a gzipped file the same as the plain one") {
  lt::TempDir dir;
  const std::vector<uint8_t> payload = lt::pattern(5 * 28 * 28);
  lt::write_gz(dir.file("b.gz"), lt::idx_file({5, 28, 28}, payload));
  lt::write_plain(dir.file("b"), lt::idx_file({5, 28, 28}, payload));
  ls::Tensor gz = ls::data::read_idx(dir.file("b.gz"), 3);
  ls::Tensor plain = ls::data::read_idx(dir.file("b"), 3);
  CHECK(gz.sizes() == ls::IntList{5, 28, 28});
  CHECK(gz.to_vector<uint8_t>() == payload);
  CHECK(plain.to_vector<uint8_t>() == payload);
}

TEST_CASE("idx: a 1-d label file, and an empty one") {
  lt::TempDir dir;
  lt::write_gz(dir.file("l.gz"), lt::idx_file({6}, {0, 1, 2, 9, 8, 7}));
  CHECK(ls::data::read_idx(dir.file("l.gz"), 1).to_vector<uint8_t>() ==
        std::vector<uint8_t>{0, 1, 2, 9, 8, 7});
  lt::write_plain(dir.file("e"), lt::idx_file({0}, {}));
  CHECK(ls::data::read_idx(dir.file("e"), 1).sizes() == ls::IntList{0});
}

TEST_CASE("idx: a missing file is an error naming the path") {
  lt::TempDir dir;
  CHECK_THROWS_WITH_AS(ls::data::read_idx(dir.file("nope.gz"), 3),
                       doctest::Contains("nope.gz"), ls::Error);
}

TEST_CASE("idx: wrong magic numbers are rejected") {
  lt::TempDir dir;
  // Labels where images are expected (1 dim, not 3).
  lt::write_plain(dir.file("labels"), lt::idx_file({4}, {1, 2, 3, 4}));
  CHECK_THROWS_WITH_AS(ls::data::read_idx(dir.file("labels"), 3),
                       doctest::Contains("magic number 0x801, expected 0x803"), ls::Error);
  // A value type other than unsigned byte (0x0D = float).
  std::vector<uint8_t> floats = lt::idx_file({1}, {0, 0, 0, 0});
  floats[2] = 0x0D;
  lt::write_gz(dir.file("floats.gz"), floats);
  CHECK_THROWS_WITH_AS(ls::data::read_idx(dir.file("floats.gz"), 1),
                       doctest::Contains("magic number"), ls::Error);
  // Not an IDX file at all.
  lt::write_plain(dir.file("text"), {'h', 'e', 'l', 'l', 'o', '\n'});
  CHECK_THROWS_WITH_AS(ls::data::read_idx(dir.file("text"), 1),
                       doctest::Contains("text' has magic number"), ls::Error);
  // Shorter than the magic number.
  lt::write_plain(dir.file("tiny"), {0, 0});
  CHECK_THROWS_WITH_AS(ls::data::read_idx(dir.file("tiny"), 1), doctest::Contains("too short"),
                       ls::Error);
}

TEST_CASE("idx: truncated headers and payloads are rejected") {
  lt::TempDir dir;
  std::vector<uint8_t> header = lt::idx_header({2, 28, 28});
  header.resize(9);  // magic + 1.25 dims
  lt::write_gz(dir.file("h.gz"), header);
  CHECK_THROWS_WITH_AS(ls::data::read_idx(dir.file("h.gz"), 3),
                       doctest::Contains("truncated inside its header"), ls::Error);
  // The header promises 2 images, the file holds one and a half.
  lt::write_gz(dir.file("p.gz"), lt::idx_file({2, 28, 28}, lt::pattern(28 * 28 * 3 / 2)));
  CHECK_THROWS_WITH_AS(ls::data::read_idx(dir.file("p.gz"), 3),
                       doctest::Contains("holds 1176 bytes (truncated)"), ls::Error);
  lt::write_plain(dir.file("p"), lt::idx_file({10}, lt::pattern(3)));
  CHECK_THROWS_WITH_AS(ls::data::read_idx(dir.file("p"), 1),
                       doctest::Contains("declares sizes [10]"), ls::Error);
}

TEST_CASE("idx: data beyond the declared sizes is rejected") {
  lt::TempDir dir;
  lt::write_gz(dir.file("long.gz"), lt::idx_file({3}, {1, 2, 3, 4}));
  CHECK_THROWS_WITH_AS(ls::data::read_idx(dir.file("long.gz"), 1),
                       doctest::Contains("holds more than that"), ls::Error);
}

TEST_CASE("idx: huge declared sizes fail on the real length, without allocating them") {
  lt::TempDir dir;
  // 4e9 x 4e9 x 4e9 overflows 64 bits: rejected from the header alone.
  lt::write_plain(dir.file("overflow"), lt::idx_file({4000000000u, 4000000000u, 4000000000u}, {}));
  CHECK_THROWS_WITH_AS(ls::data::read_idx(dir.file("overflow"), 3),
                       doctest::Contains("overflows"), ls::Error);
  // 60000 x 60000 x 60000 (~2e14 bytes) fits in 64 bits: the reader must find the
  // file holds 100 bytes, not try to allocate 200 TB.
  lt::write_gz(dir.file("big.gz"), lt::idx_file({60000, 60000, 60000}, lt::pattern(100)));
  CHECK_THROWS_WITH_AS(ls::data::read_idx(dir.file("big.gz"), 3),
                       doctest::Contains("holds 100 bytes (truncated)"), ls::Error);
}

TEST_CASE("idx: a corrupt gzip stream is an error, not a crash") {
  lt::TempDir dir;
  lt::write_gz(dir.file("c.gz"), lt::idx_file({1000}, lt::pattern(1000)));
  // Keep the gzip header but cut the compressed stream in half.
  std::ifstream in(dir.file("c.gz"), std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > 20);
  bytes.resize(bytes.size() / 2);
  lt::write_plain(dir.file("cut.gz"), bytes);
  CHECK_THROWS_AS(ls::data::read_idx(dir.file("cut.gz"), 1), ls::Error);
  // Flip bits in the middle of the compressed data.
  lt::write_gz(dir.file("d.gz"), lt::idx_file({1000}, lt::pattern(1000)));
  std::ifstream in2(dir.file("d.gz"), std::ios::binary);
  std::vector<uint8_t> good((std::istreambuf_iterator<char>(in2)), std::istreambuf_iterator<char>());
  for (size_t i = 12; i < good.size() - 8; i += 3) good[i] ^= 0xA5;
  lt::write_plain(dir.file("flipped.gz"), good);
  CHECK_THROWS_AS(ls::data::read_idx(dir.file("flipped.gz"), 1), ls::Error);
}
