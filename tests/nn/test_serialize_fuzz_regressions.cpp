// tests/nn/test_serialize_fuzz_regressions.cpp — safetensors headers that once
// cost far more than their size (found while fuzzing the readers,
// see fuzz/): each must now load or fail quickly with a clear error.
// Read before: nn/safetensors_json.h (Note [JSON value limit]), fuzz/fuzz_safetensors.cpp.
#include <doctest/doctest.h>

#include <string>

#include "core/error.h"
#include "nn/safetensors_json.h"
#include "nn/serialize.h"

namespace ls = lockstep;

namespace {

// A whole file: the 8-byte length, the header, no data.
std::string file_with_header(const std::string& header) {
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return file + header;
}

std::string load_error(const std::string& file) {
  try {
    ls::nn::load_tensors_from_bytes(file.data(), file.size());
  } catch (const ls::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("serialize regression: a header with 50k tensors loads (duplicate-key check was quadratic)") {
  // The duplicate-key check compared each key with all earlier ones: 40k keys
  // took 12 s and a 100 MB header of short keys would take hours. 50k empty
  // tensors must load, and a duplicate among them must still be found.
  const int n = 50000;
  std::string header = "{";
  for (int i = 0; i < n; ++i) {
    header += (i ? ",\"t" : "\"t") + std::to_string(i) +
              R"(":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})";
  }
  const auto loaded = ls::nn::load_tensors_from_bytes(file_with_header(header + "}").data(),
                                                      file_with_header(header + "}").size());
  CHECK(loaded.size() == static_cast<size_t>(n));
  CHECK(loaded.at("t49999").numel() == 0);
  const std::string dup = header + R"(,"t123":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})";
  CHECK(load_error(file_with_header(dup)).find("duplicate key \"t123\"") != std::string::npos);
}

TEST_CASE("serialize regression: a header of millions of tiny values is refused, not expanded") {
  // "[0,0,0,...": 2 bytes of text per value but ~100 bytes per parsed value, so
  // a 100 MB header could take ~5 GB. Past kMaxJsonValues the parser stops.
  const size_t n = ls::nn::detail::kMaxJsonValues + 1;
  std::string header = "{\"x\":[";
  header.reserve(2 * n + 8);
  for (size_t i = 0; i < n; ++i) header += i ? ",0" : "0";
  header += "]}";
  const std::string err = load_error(file_with_header(header));
  CHECK(err.find("more than " + std::to_string(ls::nn::detail::kMaxJsonValues) + " values") !=
        std::string::npos);
  // Just under the limit parses (and is then refused for what it is: a shape
  // entry that is not a tensor description).
  std::string ok = "[";
  for (size_t i = 0; i + 1 < ls::nn::detail::kMaxJsonValues; ++i) ok += i ? ",0" : "0";
  ok += "]";
  CHECK(ls::nn::detail::parse_json(ok, "test").array.size() == ls::nn::detail::kMaxJsonValues - 1);
}
