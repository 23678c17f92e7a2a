// core/half.h — 16-bit floating point storage types: Half (IEEE fp16) and BFloat16.
//
// lockstep stores f16/bf16 tensors and converts them to and from f32; arithmetic
// runs in f32 (convert with Tensor::to(kFloat32) first). Conversions round to
// nearest even, like PyTorch.
// Read before: core/dtype.h. Read next: core/device.h.
#pragma once

#include <cstdint>
#include <cstring>

namespace lockstep {

namespace detail {
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t float_to_half_bits(float f);
float half_bits_to_float(uint16_t h);
}  // namespace detail

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(detail::float_to_half_bits(f)) {}  // NOLINT: implicit like a float
  operator float() const { return detail::half_bits_to_float(bits); }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  // Round to nearest even; NaN stays a (quiet) NaN. Written as a select, not a
  // branch, so that loops converting arrays vectorise (Note [bfloat16 elementwise]);
  // such loops store round_bits(x) into .bits, as a BFloat16 temporary inside an
  // omp simd loop stops GCC 12 from vectorising it.
  BFloat16(float f) : bits(round_bits(f)) {}  // NOLINT: implicit like a float
  static uint16_t round_bits(float f) {
    const uint32_t u = detail::float_bits(f);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (u >> 16) | 0x40u;
    return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
  operator float() const { return detail::bits_float(static_cast<uint32_t>(bits) << 16); }
};

}  // namespace lockstep
