// core/half.cpp — IEEE fp16 <-> fp32 conversion (round to nearest even).
// Read before: core/half.h.
#include "core/half.h"

namespace lockstep::detail {

uint16_t float_to_half_bits(float f) {
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7fffffffu;
  if (mag >= 0x7f800000u) {  // Inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u : 0u));
  }
  if (mag >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> Inf
  if (mag < 0x38800000u) {  // result is subnormal (or zero) in fp16
    // Add 0.5 (as fp32) so the FPU does the rounding of the shifted-out bits.
    float shifted = bits_float(mag) + 0.5f;
    return static_cast<uint16_t>(sign | (float_bits(shifted) - 0x3f000000u));
  }
  uint32_t mant_odd = (mag >> 13) & 1u;
  mag += 0xc8000fffu + mant_odd;  // re-bias exponent (127 -> 15) and round to nearest even
  return static_cast<uint16_t>(sign | (mag >> 13));
}

float half_bits_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // Inf / NaN
  if (exp == 0) {
    // zero or subnormal: value = mant * 2^-24
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace lockstep::detail
