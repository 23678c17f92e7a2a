// nn/serialize.h — checkpoints in the safetensors format.
//
//   ls::nn::save(*net, "model.safetensors");   // every parameter and buffer
//   ls::nn::load(*net, "model.safetensors");   // copies into the existing tensors
//
// Note [safetensors layout]
// The file is, byte by byte (https://github.com/huggingface/safetensors):
//   [0, 8)        N, the header length, unsigned 64-bit little-endian
//   [8, 8 + N)    a JSON object, UTF-8, padded with spaces to a multiple of 8:
//                   {"__metadata__": {"key": "value", ...},          (optional)
//                    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//   [8 + N, EOF)  the data: each tensor's elements, row-major, little-endian, at
//                 [begin, end) relative to 8 + N. Tensors tile the data exactly:
//                 no gaps, no overlaps, end - begin = numel * element size.
// dtypes: F32 F64 F16 BF16 I64 I32 U8 BOOL (lockstep's; others are refused).
// lockstep writes tensors in name order (header and data alike) and omits an
// empty __metadata__; it reads any valid file, including those written by
// Python's safetensors (which orders tensors differently).
//
// Writes are atomic: the file is written to a temporary name in the same
// directory, flushed to disk, then renamed over `path`, so a crash never leaves
// a half-written checkpoint under the real name.
// Reads are strict: a truncated or corrupt file (header length beyond the file,
// bad JSON, unknown dtype, offsets out of range, overlapping or not matching
// shape * dtype size) throws ls::Error naming the file and the problem, and the
// reader never allocates more than the file's size.
//
// Read before: nn/module.h (state_dict). Read next: nn/safetensors_json.h,
// optim/ (optimizer state uses save_tensors / load_tensors).
#pragma once

#include <map>
#include <string>

#include "nn/module.h"

namespace lockstep::nn {

using Metadata = std::map<std::string, std::string>;

// Low level: any named tensors (any shape, any lockstep dtype) to/from a file.
void save_tensors(const std::map<std::string, Tensor>& tensors, const std::string& path,
                  const Metadata& metadata = {});
// If `metadata` is given it receives the file's __metadata__ (empty if none).
std::map<std::string, Tensor> load_tensors(const std::string& path, Metadata* metadata = nullptr);

// A module's state_dict() (parameters and buffers, dotted names).
void save(const Module& module, const std::string& path, const Metadata& metadata = {});
// Loads the file into module.load_state_dict (see its strict rules).
void load(Module& module, const std::string& path, bool strict = true);

}  // namespace lockstep::nn
