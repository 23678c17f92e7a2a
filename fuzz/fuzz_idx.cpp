// fuzz/fuzz_idx.cpp — libFuzzer target for the IDX reader (data/idx.h). Each
// input is a whole file, plain or gzipped, put in a memfd and read with
// read_idx as a 1-, 2- and 3-dim file: a malformed file must throw ls::Error —
// never crash, hang, or allocate what a lying header claims (Note [Validating
// IDX sizes]; libFuzzer's -malloc_limit_mb enforces the last) — and a file that
// loads must hold exactly the values its header declares.
// Seeds: fuzz/make_seeds.cpp. Read before: data/idx.h, fuzz/fuzz_util.h. Read next: fuzz/CMakeLists.txt.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "data/idx.h"

namespace ls = lockstep;

namespace {

[[noreturn]] void fail(const std::string& what) { lockstep::fuzz::fail("fuzz_idx", what); }

const std::string& memfd_path(const uint8_t* data, size_t size) {
  return lockstep::fuzz::memfd_path("fuzz_idx", data, size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = memfd_path(data, size);
  const bool gzipped = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  for (int64_t dims = 1; dims <= 3; ++dims) {
    try {
      const ls::Tensor t = ls::data::read_idx(path, dims);
      if (t.dim() != dims || t.dtype() != ls::kUInt8) fail("wrong rank or dtype");
      // A plain file is exactly the 4 + 4 * dims header bytes plus the values.
      if (!gzipped && static_cast<size_t>(4 + 4 * dims + t.numel()) != size)
        fail("a plain file loaded with a size that does not match its header");
    } catch (const ls::Error&) {
    }
  }
  return 0;
}
