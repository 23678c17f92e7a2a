// tests/core/test_bf16_rows.cpp — the AVX-512 row loops of core/native/bf16_rows.h
// (Note [bfloat16 rows in AVX-512]) against their scalar references, bit for
// bit: every bf16 pattern widened, and float32 patterns rounded — ties to even,
// NaNs with payloads, infinities, subnormals, random bits — at every length
// from 0 to 40 (the masked last step) and at odd offsets (unaligned rows).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <vector>

#include "core/native/bf16_rows.h"

namespace nv = lockstep::native;
using lockstep::BFloat16;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// The float32 patterns the rounding must get right, then random ones.
std::vector<float> rounding_inputs() {
  const uint32_t special[] = {
      0x00000000u, 0x80000000u,               // +-0
      0x3f800000u, 0xbf800000u,               // +-1
      0x3f808000u, 0x3f818000u,               // ties: to even down, to even up
      0x3f807fffu, 0x3f808001u,               // just below and above a tie
      0x7f7fffffu, 0xff7fffffu,               // the largest finite: rounds to infinity
      0x7f800000u, 0xff800000u,               // +-inf
      0x7f800001u, 0xff800001u, 0x7fc00000u,  // NaNs: signalling (payload in the low bits), quiet
      0x7fbf0000u, 0x7f810000u,               // signalling NaNs with high payloads
      0x00000001u, 0x007fffffu, 0x00008000u,  // subnormals: the smallest, the largest, a tie
      0x80018000u, 0x00800000u,               // a negative subnormal tie, the smallest normal
  };
  std::vector<float> v;
  for (uint32_t u : special) v.push_back(from_bits(u));
  std::mt19937 rng(7);
  for (int i = 0; i < 4096; ++i) v.push_back(from_bits(static_cast<uint32_t>(rng())));
  return v;
}

}  // namespace

TEST_CASE("round_to_bf16 equals round_to_bf16_reference bit for bit at every length and offset") {
  const std::vector<float> in = rounding_inputs();
  for (int64_t offset : {0, 1, 3}) {
    for (int64_t m = 0; m <= 40; ++m) {
      for (size_t start = 0; start + offset + m <= in.size(); start += 37) {
        std::vector<BFloat16> fast(m + 2), ref(m + 2);
        for (auto* d : {&fast, &ref}) {  // a guard value after the row: must stay untouched
          (*d)[m].bits = 0x1234;
          (*d)[m + 1].bits = 0x5678;
        }
        nv::round_to_bf16(in.data() + start + offset, fast.data(), m);
        nv::round_to_bf16_reference(in.data() + start + offset, ref.data(), m);
        for (int64_t j = 0; j < m + 2; ++j) {
          if (fast[j].bits != ref[j].bits) {
            std::ostringstream os;
            os << "m " << m << " j " << j << std::hex << " input bits 0x"
               << (j < m ? to_bits(in[start + offset + j]) : 0u) << " fast 0x" << fast[j].bits
               << " reference 0x" << ref[j].bits;
            FAIL_CHECK(os.str());
          }
        }
      }
    }
  }
  // The rounding itself, on named cases: ties to even, NaN quieted, largest finite -> inf.
  std::vector<BFloat16> out(6);
  const float named[] = {from_bits(0x3f808000u), from_bits(0x3f818000u), from_bits(0x7f800001u),
                         from_bits(0x7f7fffffu), from_bits(0x00008000u), from_bits(0x80000000u)};
  nv::round_to_bf16(named, out.data(), 6);
  CHECK(out[0].bits == 0x3f80);
  CHECK(out[1].bits == 0x3f82);
  CHECK(out[2].bits == 0x7fc0);
  CHECK(out[3].bits == 0x7f80);
  CHECK(out[4].bits == 0x0000);
  CHECK(out[5].bits == 0x8000);
}

TEST_CASE("widen_bf16 equals widen_bf16_reference for every bf16 pattern, every length") {
  std::vector<BFloat16> all(65536 + 40);
  for (size_t i = 0; i < all.size(); ++i) all[i].bits = static_cast<uint16_t>(i * 7919u);
  std::vector<float> fast(all.size() + 1), ref(all.size() + 1);
  nv::widen_bf16(all.data(), fast.data(), static_cast<int64_t>(all.size()));
  nv::widen_bf16_reference(all.data(), ref.data(), static_cast<int64_t>(all.size()));
  CHECK(std::memcmp(fast.data(), ref.data(), all.size() * sizeof(float)) == 0);
  for (int64_t m = 0; m <= 40; ++m) {
    std::vector<float> f(m + 1, -7.0f), r(m + 1, -7.0f);
    nv::widen_bf16(all.data() + 5, f.data(), m);
    nv::widen_bf16_reference(all.data() + 5, r.data(), m);
    CHECK(std::memcmp(f.data(), r.data(), (m + 1) * sizeof(float)) == 0);
    CHECK(f[m] == -7.0f);  // nothing written past the row
  }
}
