// fuzz/fuzz_safetensors.cpp — libFuzzer target for the safetensors reader
// (nn/serialize.h). Each input is a whole file. It is read twice, from memory
// (load_tensors_from_bytes) and from a file (load_tensors on a memfd), and:
//   - a malformed input must throw ls::Error, never crash, hang or over-allocate
//     (ASan / UBSan and libFuzzer's -malloc_limit_mb / -timeout enforce that);
//   - both readers must agree: the same tensors, or an error for both;
//   - a file that loads holds no more tensor bytes than the input has.
// Seeds: fuzz/make_seeds.cpp. Read before: nn/serialize.h. Read next: fuzz/CMakeLists.txt.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "nn/serialize.h"

namespace ls = lockstep;

namespace {

[[noreturn]] void fail(const std::string& what) { lockstep::fuzz::fail("fuzz_safetensors", what); }

const std::string& memfd_path(const uint8_t* data, size_t size) {
  return lockstep::fuzz::memfd_path("fuzz_safetensors", data, size);
}

bool same(const std::map<std::string, ls::Tensor>& a, const std::map<std::string, ls::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    if (it == b.end()) return false;
    const ls::Tensor& u = it->second;
    if (t.dtype() != u.dtype() || t.sizes() != u.sizes() || t.nbytes() != u.nbytes()) return false;
    if (t.nbytes() > 0 && std::memcmp(t.raw_data(), u.raw_data(), t.nbytes()) != 0) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, ls::Tensor> from_bytes, from_file;
  ls::nn::Metadata meta_bytes, meta_file;
  bool bytes_ok = true, file_ok = true;
  try {
    from_bytes = ls::nn::load_tensors_from_bytes(data, size, &meta_bytes);
  } catch (const ls::Error&) {
    bytes_ok = false;
  }
  try {
    from_file = ls::nn::load_tensors(memfd_path(data, size), &meta_file);
  } catch (const ls::Error&) {
    file_ok = false;
  }
  if (bytes_ok != file_ok) fail("load_tensors_from_bytes and load_tensors disagree on success");
  if (!bytes_ok) return 0;
  if (!same(from_bytes, from_file) || meta_bytes != meta_file)
    fail("load_tensors_from_bytes and load_tensors read different tensors");
  if (meta_bytes.count(ls::nn::kChecksumKey)) fail("the checksum key leaked into the metadata");
  size_t total = 0;
  for (const auto& [name, t] : from_bytes) total += t.nbytes();
  if (total > size) fail("loaded more tensor bytes than the file holds");
  return 0;
}
