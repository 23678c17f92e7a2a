// core/native/dropout_key.h — a dropout mask as a key: whether element i is kept,
// computed from one 64-bit key and i (Note [Counter-based dropout masks] in
// core/native/dropout.cpp).
//
//   DropoutKey k = draw_dropout_key(p);     // one draw from the default generator
//   bool kept = k.keeps(i);                 // the same answer in forward and backward
//
// dropout_forward draws its bool mask with these functions, element by element; the
// fused kernels (core/native/fused_dropout.cpp) keep the key instead of the mask and
// ask it again in backward, so no mask tensor is written forward or read backward
// (Note [dropout masks kept as keys]).
//
// Read before: core/native/dropout.cpp. Read next: core/native/fused_dropout.cpp.
#pragma once

#include <cstdint>

#include "core/half.h"

namespace lockstep::native {

// The SplitMix64 output for counter value `z`; see Note [Counter-based dropout masks].
[[gnu::always_inline]] inline uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Element i of the mask drawn with `key`: kept iff the top 32 bits of its hash are
// below `threshold` ((1 - p) * 2^32; 2^32 keeps everything).
[[gnu::always_inline]] inline bool dropout_keeps(uint64_t key, uint64_t threshold, int64_t i) {
  const uint64_t h = splitmix64(key + static_cast<uint64_t>(i + 1) * 0x9E3779B97F4A7C15ull);
  return (h >> 32) < threshold;
}

// v rounded to bf16 and widened back (bits, not a BFloat16 temporary, which would
// keep an omp simd loop from vectorising): the value a bf16 tensor stores for v.
[[gnu::always_inline]] inline float rounded_to_bf16(float v) {
  return lockstep::detail::bits_float(static_cast<uint32_t>(BFloat16::round_bits(v)) << 16);
}

// One dropout's mask as its key, and the scale 1 / (1 - p) of the kept elements (0
// for p == 1, as dropout_forward: zeros, not NaNs).
struct DropoutKey {
  uint64_t key = 0;
  uint64_t threshold = 0;
  float scale = 0.0f;
  bool keeps(int64_t i) const { return dropout_keeps(key, threshold, i); }
};

// Takes one key from the default generator (under its lock) for a dropout with
// probability p, 0 <= p <= 1 (checked by the callers).
DropoutKey draw_dropout_key(double p);

}  // namespace lockstep::native
