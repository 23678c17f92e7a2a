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
  BFloat16(float f) {  // NOLINT: implicit like a float
    uint32_t u = detail::float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays a (quiet) NaN
      bits = static_cast<uint16_t>((u >> 16) | 0x40u);
      return;
    }
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    bits = static_cast<uint16_t>((u + rounding) >> 16);
  }
  operator float() const { return detail::bits_float(static_cast<uint32_t>(bits) << 16); }
};

}  // namespace lockstep
