// nn/serialize_checksum.cpp — the checksum helpers of nn/serialize_checksum.h.
// Read before: nn/serialize_checksum.h.
#include "nn/serialize_checksum.h"

#include <zlib.h>

#include <cstdio>

#include "nn/serialize.h"

namespace lockstep::nn::serialize_detail {

// The value stored under kChecksumKey: 8 lowercase hex digits.
std::string crc_hex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

bool parse_crc_hex(const std::string& s, uint32_t& out) {
  if (s.size() != 8) return false;
  out = 0;
  for (const char c : s) {
    out <<= 4;
    if (c >= '0' && c <= '9') out |= static_cast<uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f') out |= static_cast<uint32_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') out |= static_cast<uint32_t>(c - 'A' + 10);
    else return false;
  }
  return true;
}

// CRC-32 of `crc`'s bytes followed by these n (zlib's crc32; 0 for no bytes).
uint32_t crc_update(uint32_t crc, const void* data, size_t n) {
  if (n == 0) return crc;  // zlib answers 0 for a null buffer, which would reset a running CRC
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), n));
}

// Where the checksum's 8 digits start in a header as save_tensors writes it, or npos when
// the entry is not there exactly once. The key must follow '{' or ',': inside a JSON
// string every '"' is escaped, so a metadata value or key that merely contains the text
// cannot match.
size_t checksum_digits(const std::string& header) {
  const std::string field = std::string("\"") + kChecksumKey + "\":\"";
  size_t found = std::string::npos;
  for (size_t at = header.find(field); at != std::string::npos; at = header.find(field, at + 1)) {
    if (at == 0 || (header[at - 1] != '{' && header[at - 1] != ',')) continue;
    if (found != std::string::npos) return std::string::npos;  // twice
    found = at + field.size();
  }
  return found;
}

// The file's checksum (Note [Checkpoint checksum]): the CRC-32 of the 8 length bytes and
// `header` with its checksum digits read as "00000000" (they start at `digits`), then of the
// data section, whose own CRC-32 is `data_crc` over `data_size` bytes.
uint32_t file_crc(const std::string& header, size_t digits, uint32_t data_crc, uint64_t data_size) {
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
  uint32_t crc = crc_update(0, length, 8);
  crc = crc_update(crc, header.data(), digits);
  crc = crc_update(crc, "00000000", 8);
  crc = crc_update(crc, header.data() + digits + 8, header.size() - digits - 8);
  return static_cast<uint32_t>(crc32_combine(crc, data_crc, static_cast<z_off_t>(data_size)));
}

}  // namespace lockstep::nn::serialize_detail
