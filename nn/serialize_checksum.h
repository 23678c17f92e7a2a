// nn/serialize_checksum.h — the CRC-32 of a safetensors file as save_tensors writes it
// and load_tensors checks it (Note [Checkpoint checksum] in nn/serialize.h): the stored
// digits, where they sit in the header, and the whole file's CRC.
// Read before: nn/serialize.h. Read next: nn/serialize_checksum.cpp, nn/serialize.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lockstep::nn::serialize_detail {

// The value stored under kChecksumKey: 8 lowercase hex digits.
std::string crc_hex(uint32_t crc);
// The 8 hex digits `s` as a number; false when `s` is not 8 hex digits.
bool parse_crc_hex(const std::string& s, uint32_t& out);
// CRC-32 of `crc`'s bytes followed by these n (zlib's crc32; 0 for no bytes).
uint32_t crc_update(uint32_t crc, const void* data, size_t n);
// Where the checksum's 8 digits start in `header`, or npos unless the entry is there once.
size_t checksum_digits(const std::string& header);
// The file's checksum: length bytes, header with its digits read as zeros, then the data.
uint32_t file_crc(const std::string& header, size_t digits, uint32_t data_crc, uint64_t data_size);

}  // namespace lockstep::nn::serialize_detail
