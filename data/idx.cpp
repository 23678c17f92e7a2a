// data/idx.cpp — the IDX reader, with zlib for gzip; see data/idx.h and
// Note [Validating IDX sizes].
// Read before: data/idx.h. Read next: data/mnist.cpp.
#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/native/native.h"
#include "core/shape.h"

namespace lockstep::data {

namespace {
constexpr uint8_t kUnsignedByte = 0x08;
constexpr size_t kChunk = size_t{1} << 20;  // bytes decompressed per gzread

// Owns a gzFile and reads exactly or at most n bytes from it.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path), file_(gzopen(path.c_str(), "rb")) {
    LS_CHECK(file_ != nullptr, "read_idx: cannot open '", path, "' (", std::strerror(errno),
             ")");
  }
  ~GzReader() { gzclose(file_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes into out; returns how many were read (< n only at end of file).
  size_t read(uint8_t* out, size_t n) {
    size_t done = 0;
    while (done < n) {
      auto want = static_cast<unsigned>(std::min(n - done, kChunk));
      int got = gzread(file_, out + done, want);
      if (got < 0) {
        int errnum = 0;
        const char* msg = gzerror(file_, &errnum);
        throw Error(detail::str("read_idx: '", path_, "' is not a readable IDX or gzip file (",
                                msg, "); re-download or reinstall it"));
      }
      if (got == 0) break;
      done += static_cast<size_t>(got);
    }
    return done;
  }

 private:
  std::string path_;
  gzFile file_;
};

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}
}  // namespace

Tensor read_idx(const std::string& path, int64_t expected_dims) {
  // The dim count is one header byte; a negative one would size the header below as 2^64 - 4.
  LS_CHECK(expected_dims >= 0 && expected_dims <= 255, "read_idx: '", path, "': expected_dims is ",
           expected_dims, ", but an IDX file has 0 to 255 dims (3 for images, 1 for labels)");
  GzReader in(path);
  uint8_t magic[4];
  LS_CHECK(in.read(magic, 4) == 4, "read_idx: '", path,
           "' is too short to hold an IDX header (4-byte magic number)");
  LS_CHECK(magic[0] == 0 && magic[1] == 0 && magic[2] == kUnsignedByte &&
               magic[3] == expected_dims,
           "read_idx: '", path, "' has magic number 0x", std::hex, big_endian_u32(magic),
           std::dec, ", expected 0x", std::hex, 0x800 + expected_dims, std::dec,
           " (unsigned bytes, ", expected_dims, " dims); it is not the IDX file it is named as");

  std::vector<uint8_t> header(static_cast<size_t>(4 * expected_dims));
  LS_CHECK(in.read(header.data(), header.size()) == header.size(), "read_idx: '", path,
           "' is truncated inside its header (", expected_dims, " dim sizes expected)");
  // The product of the non-zero sizes is kept below 2^62 even when another size
  // is 0: the tensor's strides multiply them, and (0, 2^32-1, 2^32-1) would
  // overflow int64 there (found by fuzz/fuzz_idx.cpp).
  IntList sizes;
  uint64_t nonzero_product = 1;
  bool has_zero = false;
  for (int64_t d = 0; d < expected_dims; ++d) {
    uint32_t s = big_endian_u32(header.data() + 4 * d);
    sizes.push_back(s);
    LS_CHECK(s == 0 || nonzero_product <= (uint64_t{1} << 62) / s, "read_idx: '", path,
             "' declares sizes ", shape_str(sizes), "... whose product overflows; the header is corrupt");
    if (s == 0) has_zero = true;
    else nonzero_product *= s;
  }
  const uint64_t numel = has_zero ? 0 : nonzero_product;

  // See Note [Validating IDX sizes]: grow by what the file really holds, keep at most numel + 1.
  std::vector<uint8_t> payload;
  payload.reserve(static_cast<size_t>(std::min<uint64_t>(numel + 1, kChunk)));
  while (payload.size() <= numel) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(numel + 1 - payload.size(), kChunk));
    size_t old = payload.size();
    payload.resize(old + want);
    size_t got = in.read(payload.data() + old, want);
    payload.resize(old + got);
    if (got < want) break;
  }
  LS_CHECK(payload.size() == numel, "read_idx: '", path, "' declares sizes ", shape_str(sizes),
           " (", numel, " bytes of data) but holds ",
           payload.size() > numel ? "more than that" : std::to_string(payload.size()) + " bytes",
           payload.size() > numel ? "" : " (truncated)",
           "; the file is corrupt: re-download or reinstall it");

  Tensor out = native::empty(sizes, kUInt8);
  if (numel > 0) std::memcpy(out.raw_data(), payload.data(), payload.size());
  return out;
}

}  // namespace lockstep::data
