// tests/nn/test_serialize_checksum.cpp — checkpoint integrity: the
// CRC-32 that save_tensors writes and load_tensors verifies (Note [Checkpoint
// checksum]), files without it, the in-memory reader, and writes that are
// atomic even when they fail halfway or race (Note [Atomic checkpoint writes]).
// Read before: nn/serialize.h, tests/nn/test_serialize.cpp.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/factory.h"
#include "core/rng.h"
#include "nn/nn.h"
#include "tests/support/errors.h"
#include "tests/support/temp_files.h"

namespace ls = lockstep;
namespace fs = std::filesystem;

namespace {

// One scratch directory per test case (tests/support/temp_files.h).
struct TempDir : ls::testing::TempDir {
  TempDir() : ls::testing::TempDir("lockstep_test_checksum") {}
};
using ls::testing::read_bytes;
using ls::testing::write_bytes;

// Where the data section starts: 8 + the header length in the first 8 bytes.
size_t data_start(const std::string& file) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<uint8_t>(file[i])} << (8 * i);
  return 8 + n;
}

// The error load_tensors throws for the file at `path`, or "" if it loads.
std::string load_error(const std::string& path) {
  try {
    ls::nn::load_tensors(path);
  } catch (const ls::Error& e) {
    return e.what();
  }
  return "";
}

using lockstep::testing::contains;

std::map<std::string, ls::Tensor> sample_tensors() {
  ls::manual_seed(3);
  return {{"w", ls::randn({16, 8})}, {"b", ls::randn({8}).to(ls::kFloat64)},
          {"steps", ls::tensor(std::vector<int64_t>{41}, {1})}, {"empty", ls::zeros({0})}};
}

}  // namespace

TEST_CASE("serialize checksum: every saved file records the CRC-32 of its data section") {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  ls::nn::save_tensors(sample_tensors(), path, {{"epoch", "2"}});
  const std::string file = read_bytes(path);
  const std::string header = file.substr(8, data_start(file) - 8);
  REQUIRE(contains(header, "\"lockstep.crc32\":\""));
  // The value is 8 hex digits; loading verifies it and hides it from the caller.
  const size_t at = header.find("\"lockstep.crc32\":\"") + 18;
  const std::string hex = header.substr(at, 8);
  CHECK(hex.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(header[at + 8] == '"');
  ls::nn::Metadata meta;
  const auto loaded = ls::nn::load_tensors(path, &meta);
  CHECK(meta == ls::nn::Metadata{{"epoch", "2"}});
  CHECK(loaded.size() == 4);
  // The caller cannot set the key: it would be overwritten or mistaken for ours.
  try {
    ls::nn::save_tensors(sample_tensors(), dir.file("x.safetensors"), {{"lockstep.crc32", "0"}});
    FAIL("expected an error");
  } catch (const ls::Error& e) {
    CHECK(contains(e.what(), "reserved"));
  }
  CHECK_FALSE(fs::exists(dir.file("x.safetensors")));
}

TEST_CASE("serialize checksum: a flipped bit anywhere in the data section is caught") {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  ls::nn::save_tensors(sample_tensors(), path);
  const std::string good = read_bytes(path);
  const size_t start = data_start(good);
  REQUIRE(good.size() > start + 16);
  // First byte, a middle one, the last one: each bit flip fails with a message
  // naming the file and saying it is corrupt.
  for (size_t at : {start, start + (good.size() - start) / 2, good.size() - 1}) {
    CAPTURE(at);
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    write_bytes(path, bad);
    const std::string err = load_error(path);
    CHECK(contains(err, path));
    CHECK(contains(err, "CRC-32"));
    CHECK(contains(err, "corrupt"));
  }
  // Truncated: caught by the layout checks before the checksum.
  write_bytes(path, good.substr(0, good.size() - 3));
  CHECK(contains(load_error(path), "truncated"));
  // Cut short and padded back to length with zeros (what a crashed copy can leave).
  std::string padded = good;
  std::memset(padded.data() + good.size() - 40, 0, 40);
  write_bytes(path, padded);
  CHECK(contains(load_error(path), "CRC-32"));
  // A damaged checksum value in the header is named as such.
  std::string bad_value = good;
  const size_t at = bad_value.find("\"lockstep.crc32\":\"") + 18;
  bad_value[at] = 'x';
  write_bytes(path, bad_value);
  CHECK(contains(load_error(path), "not 8 hex digits"));
  // And the untouched file still loads.
  write_bytes(path, good);
  CHECK(load_error(path).empty());
}

TEST_CASE("serialize checksum: files without a checksum still load") {
  // A file as Python's safetensors (or an older lockstep) writes it: no
  // lockstep.crc32, other metadata only. Flipping a data byte is then not
  // detectable, and it loads.
  TempDir dir;
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  const float values[2] = {1.5f, -2.0f};
  file += header + std::string(reinterpret_cast<const char*>(values), 8);
  const std::string path = dir.file("python.safetensors");
  write_bytes(path, file);
  ls::nn::Metadata meta;
  const auto t = ls::nn::load_tensors(path, &meta);
  CHECK(meta == ls::nn::Metadata{{"format", "pt"}});
  CHECK(t.at("x").to_vector<float>() == std::vector<float>{1.5f, -2.0f});
}

TEST_CASE("serialize checksum: load_tensors_from_bytes reads what load_tensors reads") {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  const auto tensors = sample_tensors();
  ls::nn::save_tensors(tensors, path, {{"k", "v"}});
  const std::string file = read_bytes(path);
  ls::nn::Metadata meta;
  const auto loaded = ls::nn::load_tensors_from_bytes(file.data(), file.size(), &meta);
  CHECK(meta == ls::nn::Metadata{{"k", "v"}});
  REQUIRE(loaded.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    CAPTURE(name);
    CHECK(ls::equal(loaded.at(name), t));
  }
  std::string bad = file;
  bad.back() = static_cast<char>(bad.back() ^ 1);
  try {
    ls::nn::load_tensors_from_bytes(bad.data(), bad.size());
    FAIL("expected an error");
  } catch (const ls::Error& e) {
    CHECK(contains(e.what(), "load_tensors_from_bytes"));
    CHECK(contains(e.what(), "CRC-32"));
  }
  CHECK_THROWS_AS(ls::nn::load_tensors_from_bytes(file.data(), 5), ls::Error);
  CHECK_THROWS_AS(ls::nn::load_tensors_from_bytes(nullptr, 0), ls::Error);
}

TEST_CASE("serialize atomic: a save that fails halfway leaves the previous checkpoint intact") {
  // RLIMIT_FSIZE makes the write fail with EFBIG after 64 KiB, as a full disk
  // would: the old file must be untouched and no temporary left behind.
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  ls::nn::save_tensors(sample_tensors(), path);
  const std::string before = read_bytes(path);

  std::map<std::string, ls::Tensor> big = {{"w", ls::zeros({256, 1024})}};  // 1 MiB
  struct rlimit old_limit{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);  // get EFBIG, not the signal
  struct rlimit small = old_limit;
  small.rlim_cur = 64 * 1024;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  std::string err;
  try {
    ls::nn::save_tensors(big, path);
  } catch (const ls::Error& e) {
    err = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::signal(SIGXFSZ, old_handler);

  CHECK(contains(err, "failed"));
  CHECK(contains(err, path));
  CHECK(read_bytes(path) == before);
  CHECK(dir.count_files() == 1);  // the temporary was removed
  CHECK(load_error(path).empty());
}

TEST_CASE("serialize atomic: concurrent saves to one path leave one whole checkpoint") {
  // Two threads save different tensors to the same path over and over; every
  // temporary name is unique, so the file is always one save or the other,
  // never a mix, and it always passes its checksum.
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  const std::map<std::string, ls::Tensor> a = {{"w", ls::full({64, 256}, 1.0)}};
  const std::map<std::string, ls::Tensor> b = {{"w", ls::full({64, 256}, 2.0)}};
  std::vector<std::string> errors(2);
  auto saver = [&](int id) {
    try {
      for (int i = 0; i < 10; ++i) ls::nn::save_tensors(id == 0 ? a : b, path);
    } catch (const ls::Error& e) {
      errors[id] = e.what();
    }
  };
  std::thread t0(saver, 0), t1(saver, 1);
  t0.join();
  t1.join();
  CHECK(errors[0].empty());
  CHECK(errors[1].empty());
  const auto loaded = ls::nn::load_tensors(path);
  const ls::Tensor& w = loaded.at("w");
  const double first = w.to(ls::kFloat64).to_vector<double>()[0];
  CHECK((first == 1.0 || first == 2.0));
  CHECK(ls::equal(w, ls::full({64, 256}, first)));
  CHECK(dir.count_files() == 1);
}

TEST_CASE("serialize checksum: an edited metadata value is caught") {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  ls::nn::save_tensors(sample_tensors(), path, {{"epochs_done", "7"}, {"hparams.lr", "0.05"}});
  const std::string good = read_bytes(path);
  // The edits a user makes by hand: same length, so only the checksum can tell.
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"\"7\"", "\"9\""}, {"0.05", "0.50"}}) {
    CAPTURE(to);
    std::string edited = good;
    const size_t at = edited.find(from);
    REQUIRE(at < data_start(good));
    edited.replace(at, from.size(), to);
    write_bytes(path, edited);
    const std::string err = load_error(path);
    CHECK(contains(err, path));
    CHECK(contains(err, "CRC-32 (header, metadata and data)"));
    CHECK(contains(err, "modified after it was written"));
  }
  // A flipped byte of the tensor table (a shape digit's neighbour in "data_offsets") too.
  std::string table = good;
  const size_t offsets = table.find("\"data_offsets\":[0,");
  REQUIRE(offsets != std::string::npos);
  table[offsets + 1] = 'D';
  write_bytes(path, table);
  CHECK(!load_error(path).empty());
  write_bytes(path, good);
  CHECK(load_error(path).empty());
  // Metadata that merely contains the checksum's key text does not confuse either side.
  const ls::nn::Metadata tricky{{"a\"lockstep.crc32", "b"}, {"c", ",\"lockstep.crc32\":\"12345678"}};
  ls::nn::save_tensors(sample_tensors(), path, tricky);
  ls::nn::Metadata back;
  ls::nn::load_tensors(path, &back);
  CHECK(back == tricky);
}

TEST_CASE("serialize checksum: a file whose checksum covers the data only (older lockstep) still loads") {
  // a97ca09d: zlib.crc32 of the 12 data bytes, as lockstep wrote it before the checksum covered the whole file.
  TempDir dir;
  std::string header = R"({"__metadata__":{"format":"pt","lockstep.crc32":"a97ca09d"},)"
                       R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"I32","shape":[1],"data_offsets":[8,12]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  const float a[2] = {1, 2};
  const int32_t b = 7;
  file += header + std::string(reinterpret_cast<const char*>(a), 8) + std::string(reinterpret_cast<const char*>(&b), 4);
  const std::string path = dir.file("old.safetensors");
  write_bytes(path, file);
  CHECK(load_error(path).empty());
  // Its data is still checked.
  file.back() = 8;
  write_bytes(path, file);
  CHECK(contains(load_error(path), "CRC-32"));
}

TEST_CASE("serialize atomic: a symbolic link is followed and its target replaced, and a FIFO is refused") {
  TempDir dir;
  fs::create_directory(dir.file("store"));
  const std::string link = dir.file("link.safetensors");
  fs::create_symlink("store/real.safetensors", link);
  ls::nn::save_tensors(sample_tensors(), link);
  CHECK(fs::is_symlink(link));
  CHECK(fs::is_regular_file(dir.file("store/real.safetensors")));
  ls::nn::save_tensors({{"w", ls::ones({2})}}, link);  // again, over the existing target
  CHECK(fs::is_symlink(link));
  CHECK(ls::nn::load_tensors(link).count("w") == 1);
  CHECK(ls::nn::load_tensors(dir.file("store/real.safetensors")).size() == 1);

  const std::string fifo = dir.file("fifo.safetensors");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  CHECK(contains(load_error(fifo), "is a FIFO (named pipe), not a checkpoint file"));
  const std::string err = ls::testing::error_of([&] { ls::nn::save_tensors(sample_tensors(), fifo); });
  CHECK_MESSAGE(contains(err, "is a FIFO (named pipe); a checkpoint must be a regular file"), err);
  CHECK(fs::is_fifo(fifo));
}
