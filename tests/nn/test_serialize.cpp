// tests/nn/test_serialize.cpp — safetensors checkpoints: round trips for every
// dtype (0-d, empty and non-contiguous tensors too), metadata, the byte-exact
// layout of a tiny file, a file laid out the way Python's safetensors writes
// it, module save/load, atomic replacement, and clear errors (never a crash)
// for truncated and corrupt files. The checksum and failure-atomicity are in
// test_serialize_checksum.cpp, inputs found by fuzzing in
// test_serialize_fuzz_regressions.cpp.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/rng.h"
#include "nn/nn.h"
#include "tests/support/errors.h"
#include "tests/support/temp_files.h"

namespace ls = lockstep;
namespace fs = std::filesystem;
using Bytes = std::string;

namespace {

// One scratch directory per test case (tests/support/temp_files.h).
struct TempDir : ls::testing::TempDir {
  TempDir() : ls::testing::TempDir("lockstep_test_serialize") {}
};
using ls::testing::read_bytes;
using ls::testing::write_bytes;

Bytes u64_le(uint64_t n) {
  Bytes b(8, '\0');
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return b;
}

// A safetensors file from a header text and raw data (no padding added).
Bytes make_file(const std::string& header, const Bytes& data) {
  return u64_le(header.size()) + header + data;
}

Bytes f32_bytes(const std::vector<float>& v) {
  Bytes b(v.size() * 4, '\0');
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// The error message load_tensors gives for `bytes`, or "" if it loaded.
std::string load_error(const TempDir& dir, const Bytes& bytes) {
  const std::string path = dir.file("bad.safetensors");
  write_bytes(path, bytes);
  try {
    ls::nn::load_tensors(path);
  } catch (const ls::Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find(path) != std::string::npos);  // every error names the file
    return msg;
  }
  return "";
}

using lockstep::testing::contains;

}  // namespace

TEST_CASE("serialize: every dtype round-trips, with 0-d, empty and non-contiguous tensors") {
  ls::manual_seed(0);
  TempDir dir;
  std::map<std::string, ls::Tensor> tensors;
  tensors["f32"] = ls::randn({2, 3});
  tensors["f64"] = ls::randn({4}, ls::kFloat64);
  tensors["f16"] = ls::randn({3, 2}).to(ls::kFloat16);
  tensors["bf16"] = ls::randn({5}).to(ls::kBFloat16);
  tensors["i64"] = ls::tensor(std::vector<int64_t>{-1, 0, 1LL << 40}, {3});
  tensors["i32"] = ls::tensor(std::vector<int32_t>{-7, 8}, {2, 1});
  tensors["u8"] = ls::tensor(std::vector<uint8_t>{0, 255, 3}, {3});
  tensors["bool"] = ls::tensor(std::vector<uint8_t>{1, 0, 0, 1}, {2, 2}).ne(0.0);
  tensors["scalar"] = ls::scalar_tensor(3.5);
  tensors["empty"] = ls::zeros({0, 4});
  tensors["transposed"] = ls::randn({3, 4}).t();
  const std::string path = dir.file("all.safetensors");
  ls::nn::save_tensors(tensors, path, {{"step", "12"}, {"note", "quote \" and \\ and \n"}});

  ls::nn::Metadata meta;
  auto loaded = ls::nn::load_tensors(path, &meta);
  CHECK(meta == ls::nn::Metadata{{"step", "12"}, {"note", "quote \" and \\ and \n"}});
  REQUIRE(loaded.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    CAPTURE(name);
    REQUIRE(loaded.count(name));
    const ls::Tensor& u = loaded[name];
    CHECK(u.dtype() == t.dtype());
    CHECK(u.sizes() == t.sizes());
    CHECK(u.is_contiguous());
    CHECK(u.to(ls::kFloat64).to_vector<double>() == t.to(ls::kFloat64).to_vector<double>());
  }
  CHECK(loaded["scalar"].dim() == 0);
  CHECK(loaded["i64"].to_vector<int64_t>()[2] == (1LL << 40));

  // No metadata written: none read back (and the out-parameter is cleared).
  ls::nn::save_tensors({{"x", ls::ones({1})}}, path);
  ls::nn::load_tensors(path, &meta);
  CHECK(meta.empty());
}

TEST_CASE("serialize: the bytes of a tiny file are exactly the safetensors layout") {
  TempDir dir;
  const std::string path = dir.file("tiny.safetensors");
  ls::nn::save_tensors({{"b", ls::tensor(std::vector<int32_t>{7}, {1})},
                        {"a", ls::tensor(std::vector<float>{1, 2}, {2})}},
                       path, {{"format", "pt"}});
  // 25fbcb84: Python's zlib.crc32 of this whole file with the checksum's digits read as
  // "00000000" (Note [Checkpoint checksum]).
  const std::string header =
      R"({"__metadata__":{"format":"pt","lockstep.crc32":"25fbcb84"},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"I32","shape":[1],"data_offsets":[8,12]}})";
  const std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  CHECK(padded.size() % 8 == 0);
  Bytes data = f32_bytes({1, 2});
  data += Bytes("\x07\x00\x00\x00", 4);
  const Bytes expected = make_file(padded, data);
  CHECK(read_bytes(path) == expected);
}

TEST_CASE("serialize: any valid layout of the header loads") {
  // Hand-made: __metadata__ first, tensors not in name order, fields in another
  // order, whitespace in the JSON, an escaped name and trailing-space padding
  // are all valid and must be accepted.
  TempDir dir;
  const std::string header =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"z.weight\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}, "
      "\"a\\u00e9\" : {\"shape\":[2, 1],\"dtype\":\"F32\",\"data_offsets\":[8,16]},"
      "\"mask\":{\"dtype\":\"BOOL\",\"shape\":[],\"data_offsets\":[16,17]}}      ";
  double d = -2.5;
  Bytes data(reinterpret_cast<const char*>(&d), 8);
  data += f32_bytes({3, 4});
  data += Bytes("\x01", 1);
  const std::string path = dir.file("python.safetensors");
  write_bytes(path, make_file(header, data));
  ls::nn::Metadata meta;
  auto t = ls::nn::load_tensors(path, &meta);
  CHECK(meta.at("format") == "pt");
  REQUIRE(t.size() == 3);
  CHECK(t.at("z.weight").item<double>() == -2.5);
  CHECK(t.at("a\xc3\xa9").sizes() == ls::IntList{2, 1});
  CHECK(t.at("a\xc3\xa9").to_vector<float>() == std::vector<float>{3, 4});
  CHECK(t.at("mask").dtype() == ls::kBool);
  CHECK(t.at("mask").item<bool>());
}

TEST_CASE("serialize: a file written by Python's safetensors loads") {
  // The bytes of safetensors.torch.save_file (safetensors 0.8.0, torch 1.13) for
  //   {"w": tensor([[1.5, -2.0]]), "b16": tensor([1.0, -0.5], bfloat16),
  //    "h": tensor([3.0], float16), "i": tensor([7, -9]), "m": tensor([True, False, True]),
  //    "d": tensor(2.25, float64)},  metadata={"format": "pt"}
  const std::string hex =
      "70010000000000007b225f5f6d657461646174615f5f223a7b22666f726d6174223a227074227d2c2269223a"
      "7b226474797065223a22493634222c227368617065223a5b325d2c22646174615f6f666673657473223a5b30"
      "2c31365d7d2c2264223a7b226474797065223a22463634222c227368617065223a5b5d2c22646174615f6f66"
      "6673657473223a5b31362c32345d7d2c2277223a7b226474797065223a22463332222c227368617065223a5b"
      "312c325d2c22646174615f6f666673657473223a5b32342c33325d7d2c22623136223a7b226474797065223a"
      "2242463136222c227368617065223a5b325d2c22646174615f6f666673657473223a5b33322c33365d7d2c22"
      "68223a7b226474797065223a22463136222c227368617065223a5b315d2c22646174615f6f66667365747322"
      "3a5b33362c33385d7d2c226d223a7b226474797065223a22424f4f4c222c227368617065223a5b335d2c2264"
      "6174615f6f666673657473223a5b33382c34315d7d7d20200700000000000000f7ffffffffffffff00000000"
      "000002400000c03f000000c0803f00bf0042010001";
  Bytes bytes;
  for (size_t i = 0; i < hex.size(); i += 2) bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  TempDir dir;
  const std::string path = dir.file("torch.safetensors");
  write_bytes(path, bytes);
  ls::nn::Metadata meta;
  auto t = ls::nn::load_tensors(path, &meta);
  CHECK(meta == ls::nn::Metadata{{"format", "pt"}});
  REQUIRE(t.size() == 6);
  CHECK(t.at("w").sizes() == ls::IntList{1, 2});
  CHECK(t.at("w").to_vector<float>() == std::vector<float>{1.5f, -2.0f});
  CHECK(t.at("b16").dtype() == ls::kBFloat16);
  CHECK(t.at("b16").to(ls::kFloat32).to_vector<float>() == std::vector<float>{1.0f, -0.5f});
  CHECK(t.at("h").dtype() == ls::kFloat16);
  CHECK(t.at("h").to(ls::kFloat32).item<float>() == 3.0f);
  CHECK(t.at("i").to_vector<int64_t>() == std::vector<int64_t>{7, -9});
  CHECK(t.at("m").dtype() == ls::kBool);
  CHECK(t.at("m").to(ls::kInt64).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  CHECK(t.at("d").dim() == 0);
  CHECK(t.at("d").item<double>() == 2.25);
}

TEST_CASE("serialize: save and load a module, replacing the file atomically") {
  TempDir dir;
  ls::manual_seed(1);
  auto net = std::make_shared<ls::nn::Sequential>();
  net->push_back("conv", std::make_shared<ls::nn::Conv2d>(ls::nn::Conv2dOptions(2, 3, 3)));
  net->push_back("bn", std::make_shared<ls::nn::BatchNorm2d>(3));
  const std::string path = dir.file("model.safetensors");
  {
    ls::NoGradGuard no_grad;
    net->named_buffers()[0].second.fill_(0.25);  // bn.running_mean
    net->named_buffers()[2].second.fill_(9.0);   // bn.num_batches_tracked
  }
  write_bytes(path, "an old file that is replaced");
  ls::nn::save(*net, path);
  // Only the checkpoint is left in the directory: the temporary was renamed.
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir.path())) files += entry.is_regular_file();
  CHECK(files == 1);

  ls::manual_seed(2);
  auto other = std::make_shared<ls::nn::Sequential>();
  other->push_back("conv", std::make_shared<ls::nn::Conv2d>(ls::nn::Conv2dOptions(2, 3, 3)));
  other->push_back("bn", std::make_shared<ls::nn::BatchNorm2d>(3));
  ls::nn::load(*other, path);
  auto a = net->state_dict(), b = other->state_dict();
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    CAPTURE(name);
    CHECK(ls::equal(t, b.at(name)));
  }
  CHECK(b.at("bn.num_batches_tracked").item<int64_t>() == 9);

  // A module that does not match: the error names the file and the key.
  ls::nn::Sequential wrong;
  wrong.push_back("conv", std::make_shared<ls::nn::Conv2d>(ls::nn::Conv2dOptions(2, 4, 3)));
  try {
    ls::nn::load(wrong, path);
    FAIL("expected an error");
  } catch (const ls::Error& e) {
    CHECK(contains(e.what(), path));
    CHECK(contains(e.what(), "bn.running_mean"));
  }
  CHECK_THROWS_AS(ls::nn::load(wrong, path, /*strict=*/false), ls::Error);  // conv.weight's shape
  CHECK_THROWS_AS(ls::nn::save(*net, dir.file("no/such/dir/m.safetensors")), ls::Error);
}

TEST_CASE("serialize: truncated and corrupt files throw errors that say what is wrong") {
  TempDir dir;
  const std::string good_header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const Bytes good_data = f32_bytes({1, 2});
  CHECK(load_error(dir, make_file(good_header, good_data)).empty());

  CHECK_THROWS_AS(ls::nn::load_tensors(dir.file("missing.safetensors")), ls::Error);
  CHECK(contains(load_error(dir, ""), "fewer than the 8-byte"));
  CHECK(contains(load_error(dir, "abc"), "fewer than the 8-byte"));
  // Header length larger than the file, and absurdly large.
  CHECK(contains(load_error(dir, u64_le(1000) + good_header), "larger than the rest"));
  CHECK(contains(load_error(dir, u64_le(~uint64_t{0}) + good_header), "larger than the rest"));
  CHECK(contains(load_error(dir, u64_le(1ULL << 62) + good_header), "larger than the rest"));
  // Truncated data.
  CHECK(contains(load_error(dir, make_file(good_header, good_data.substr(0, 5))), "past the end"));
  // Trailing bytes that no tensor covers.
  CHECK(contains(load_error(dir, make_file(good_header, good_data + "xyz")), "cover 8 bytes"));

  auto with_header = [&](const std::string& header) { return load_error(dir, make_file(header, good_data)); };
  CHECK(contains(with_header(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), "bad JSON"));
  CHECK(contains(with_header(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}})"), "bad JSON"));
  CHECK(contains(with_header(R"({"x":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})"), "bad JSON"));
  CHECK(contains(with_header(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})"), "bad JSON"));
  CHECK(contains(with_header(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8],}})"), "bad JSON"));
  CHECK(contains(with_header(R"({"x":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})"), "duplicate"));
  CHECK(contains(with_header(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,99999999999999999999]}})"), "64 bits"));
  CHECK(contains(with_header(R"([1,2])"), "must be a JSON object"));
  CHECK(contains(with_header(std::string(200, '[') + std::string(200, ']')), "nesting"));
  CHECK(contains(with_header(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} x)"), "after the JSON"));
  CHECK(contains(with_header(R"({"x":{"dtype":"I16","shape":[4],"data_offsets":[0,8]}})"), "unsupported dtype \"I16\""));
  CHECK(contains(with_header(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})"), "needs 12"));
  CHECK(contains(with_header(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})"), "end before"));
  CHECK(contains(with_header(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})"), "past the end"));
  CHECK(contains(with_header(R"({"x":{"dtype":"F32","shape":[2]}})"), "needs the fields"));
  CHECK(contains(with_header(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})"), "unknown field"));
  CHECK(contains(with_header(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})"), "more elements"));
  CHECK(contains(with_header(R"({"__metadata__":{"k":1},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"), "must be a string"));
  // Overlapping and gapped tensors.
  CHECK(contains(with_header(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})"), "overlap"));
  CHECK(contains(load_error(dir, make_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                           R"("y":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                           f32_bytes({1, 2, 3}))), "gap"));
  // Random garbage of every length up to 64 bytes never crashes.
  for (size_t n = 0; n <= 64; ++n) {
    Bytes garbage(n, '\0');
    for (size_t i = 0; i < n; ++i) garbage[i] = static_cast<char>((i * 131 + n * 17) & 0xFF);
    CHECK_FALSE(load_error(dir, garbage).empty());
  }
}
