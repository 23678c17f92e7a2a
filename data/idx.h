// data/idx.h — reading IDX files, the format of MNIST and Fashion-MNIST.
//
// An IDX file is a big-endian header followed by raw values:
//   bytes 0-1  zero
//   byte  2    value type (0x08 = unsigned byte, the only one these datasets use)
//   byte  3    number of dims D
//   4 * D      the size of each dim, big-endian uint32
//   then prod(sizes) values in row-major order, and nothing after them.
// Images are (N, rows, cols) with magic 0x00000803, labels (N) with 0x00000801.
// Files may be gzipped: zlib's gzread reads .gz and plain files alike.
//
// § Note [Validating IDX sizes]
// A header is untrusted input: it can claim 2^32 x 2^32 x 2^32 values. So the
// reader decompresses the payload in fixed-size chunks and never keeps more
// than the header promised plus one byte; only once the real length matches the
// header exactly does it allocate a tensor. A lying header costs at most the
// file's actual contents, never the header's claim. The product of the
// non-zero sizes must also stay below 2^62, even when another size is 0 (an
// empty tensor), since the tensor's strides multiply them. fuzz/fuzz_idx.cpp
// checks all this on random files.
// Read before: data/dataset.h. Read next: data/mnist.h.
#pragma once

#include <string>

#include "core/tensor.h"

namespace lockstep::data {

// Reads an unsigned-byte IDX file with `expected_dims` dims (3 for images, 1 for
// labels) into a uint8 tensor of the sizes in its header. Throws ls::Error
// naming the path for a missing, unreadable, corrupt or truncated file.
Tensor read_idx(const std::string& path, int64_t expected_dims);

}  // namespace lockstep::data
