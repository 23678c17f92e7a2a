// nn/serialize.h — checkpoints in the safetensors format.
//
//   ls::nn::save(*net, "model.safetensors");   // every parameter and buffer
//   ls::nn::load(*net, "model.safetensors");   // copies into the existing tensors
//
// § Note [safetensors layout]
// The file is, byte by byte (https://github.com/huggingface/safetensors):
//   [0, 8)        N, the header length, unsigned 64-bit little-endian
//   [8, 8 + N)    a JSON object, UTF-8, padded with spaces to a multiple of 8:
//                   {"__metadata__": {"key": "value", ...},          (optional)
//                    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//   [8 + N, EOF)  the data: each tensor's elements, row-major, little-endian, at
//                 [begin, end) relative to 8 + N. Tensors tile the data exactly:
//                 no gaps, no overlaps, end - begin = numel * element size.
// dtypes: F32 F64 F16 BF16 I64 I32 U8 BOOL (lockstep's; others are refused).
// lockstep writes tensors in name order (header and data alike) and its
// checksum under __metadata__ (below); it reads any valid file, including those
// written by Python's safetensors (which orders tensors differently).
//
// § Note [Checkpoint checksum]
// save_tensors stores "lockstep.crc32" in __metadata__: the CRC-32 (zlib's
// crc32, the gzip/PNG polynomial) of the whole file as written — the 8 length
// bytes, the header and the data section — with the checksum's own 8 digits
// read as "00000000"; it is written as 8 lowercase hex digits. load_tensors
// recomputes it while reading and throws, naming the file, when it differs, so
// a flipped bit, a file cut short and padded back, or an edited metadata value
// or tensor entry (a hand-changed "epochs_done") is caught rather than loaded.
// (In Python: zlib.crc32 of the file's bytes with those digits replaced.) A file
// written before the checksum covered the header records the CRC-32 of the data
// section alone; it still loads (a changed file matches that by chance once in
// 2^32). The key is consumed: load_tensors' metadata out-parameter never
// contains it, and save_tensors refuses it in user metadata. Files without it
// (Python's safetensors) load as before, guarded by the strict parser only.
//
// § Note [Atomic checkpoint writes]
// The file is written to a unique temporary name in the same directory
// (path.tmp.<pid>.<n>), flushed and fsync'ed, then renamed over `path`, and the
// directory is fsync'ed: a crash or a failed write never leaves a half-written
// checkpoint under the real name — the previous one stays until the new one is
// complete — and a failed save removes its temporary. When `path` is a symbolic
// link the link is followed (through every link) and its target is replaced,
// the temporary beside the target; the link stays. A `path` that exists and is
// not a regular file (a FIFO, a device, a directory) is refused, by the reader
// too, before it is opened (opening a FIFO would block).
//
// Reads are strict: a truncated or corrupt file (header length beyond the file,
// bad JSON, unknown dtype, offsets out of range, overlapping or not matching
// shape * dtype size, a checksum that does not match) throws ls::Error naming
// the file and the problem, and the reader never allocates more than the
// file's size (fuzz/fuzz_safetensors.cpp checks this on random input).
//
// Read before: nn/module.h (state_dict). Read next: nn/safetensors_json.h,
// nn/serialize.cpp, optim/ (optimizer state uses save_tensors / load_tensors).
#pragma once

#include <map>
#include <string>

#include "nn/module.h"

namespace lockstep::nn {

using Metadata = std::map<std::string, std::string>;

// The __metadata__ key of the checksum (Note [Checkpoint checksum]).
inline constexpr const char* kChecksumKey = "lockstep.crc32";

// Low level: any named tensors (any shape, any lockstep dtype) to/from a file.
void save_tensors(const std::map<std::string, Tensor>& tensors, const std::string& path,
                  const Metadata& metadata = {});
// If `metadata` is given it receives the file's __metadata__ (empty if none).
std::map<std::string, Tensor> load_tensors(const std::string& path, Metadata* metadata = nullptr);
// The same reader over the `size` bytes of a whole file held in memory.
std::map<std::string, Tensor> load_tensors_from_bytes(const void* data, size_t size,
                                                      Metadata* metadata = nullptr);

// A module's state_dict() (parameters and buffers, dotted names).
void save(const Module& module, const std::string& path, const Metadata& metadata = {});
// Loads the file into module.load_state_dict (see its strict rules).
void load(Module& module, const std::string& path, bool strict = true);

}  // namespace lockstep::nn
