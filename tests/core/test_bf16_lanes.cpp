// tests/core/test_bf16_lanes.cpp — the vector widths of core/native/fast/bf16_lanes.h
// against the one-float lanes (Note [Row lanes, same bits]): one row program that
// uses every operation, run at each width this build has, on float32 and bf16
// patterns that the rounding and the comparisons must get right (ties, NaNs,
// infinities, subnormals, +-0) and random ones, at every row length from 0 to 40
// (the masked last step) and at an odd offset. Results bit for bit, guards
// after the row untouched; a NaN result need only be a NaN (IEEE leaves the
// payload of an arithmetic NaN to the instruction's operand order).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/native/fast/bf16_lanes.h"

namespace nv = lockstep::native;
using lockstep::BFloat16;

namespace {

using lockstep::detail::bits_float;
using lockstep::detail::float_bits;
BFloat16 bf16_of_bits(uint16_t bits) {
  BFloat16 b;
  b.bits = bits;
  return b;
}

// One row's inputs and every output the program writes.
struct Row {
  std::vector<BFloat16> b;            // bf16 input
  std::vector<float> f, g;            // float inputs
  std::vector<float> fma_out, trip;   // fma(b, f, g); round_trip(f - g)
  std::vector<BFloat16> relu_out;     // relu(f + b), rounded
  std::vector<uint16_t> bits;         // f > 0, as mask bits
  std::vector<float> kept;            // g where the stored bit is set, else 0
};

// The program, at the width of namespace NS; m values from offset `o`.
#define LOCKSTEP_ROW_PROGRAM(NAME, NS)                                                    \
  void NAME(Row& r, int64_t o, int64_t m) {                                               \
    using namespace nv::NS;                                                               \
    for (int64_t j = 0; j < m; j += kLanes) {                                             \
      const K k = first(m - j);                                                           \
      const F vb = load(r.b.data() + o + j, k), vf = load(r.f.data() + o + j, k);         \
      const F vg = load(r.g.data() + o + j, k);                                           \
      store(r.fma_out.data() + j, k, fma(vb, vf, vg));                                    \
      store(r.trip.data() + j, k, round_trip(sub(vf, vg)));                               \
      store(r.relu_out.data() + j, k, relu(add(vf, vb)));                                 \
      store_bits(r.bits.data(), j, positive(k, vf));                                      \
    }                                                                                     \
    for (int64_t j = 0; j < m; j += kLanes) {                                             \
      const K k = first(m - j);                                                           \
      store(r.kept.data() + j, k, keep(load_bits(r.bits.data(), j, k), load(r.g.data() + o + j, k))); \
    }                                                                                     \
  }
LOCKSTEP_ROW_PROGRAM(run_scalar, lanes_scalar)
#if LOCKSTEP_BF16_LANES_AVX2
LOCKSTEP_ROW_PROGRAM(run_avx2, lanes_avx2)
#endif
#if LOCKSTEP_BF16_ROWS_AVX512
LOCKSTEP_ROW_PROGRAM(run_avx512, lanes_avx512)
#endif
#undef LOCKSTEP_ROW_PROGRAM

// Float patterns the operations must get right, then random ones.
std::vector<float> float_inputs(uint32_t seed) {
  const uint32_t special[] = {
      0x00000000u, 0x80000000u, 0x3f800000u, 0xbf800000u,  // +-0, +-1
      0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u,  // ties and their neighbours
      0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u,  // largest finite, +-inf
      0x7f800001u, 0xffc00000u, 0x7fbf0000u,               // NaNs
      0x00000001u, 0x007fffffu, 0x00008000u, 0x80018000u,  // subnormals
  };
  std::vector<float> v;
  for (uint32_t u : special) v.push_back(bits_float(u));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int i = 0; i < 600; ++i) {
    v.push_back(i % 3 == 0 ? bits_float(static_cast<uint32_t>(rng())) : normal(rng));
  }
  return v;
}

Row make_row(size_t n, size_t m, uint32_t seed) {
  Row r;
  r.f = float_inputs(seed);
  r.g = float_inputs(seed + 1);
  std::mt19937 rng(seed + 2);
  for (float v : float_inputs(seed + 3)) r.b.push_back(BFloat16(v));
  for (int i = 0; i < 64; ++i) r.b.push_back(bf16_of_bits(static_cast<uint16_t>(rng())));
  r.f.resize(n);
  r.g.resize(n);
  r.b.resize(n);
  // Outputs: m values and 8 guards after them (16-bit words: the row's and one).
  r.fma_out.assign(m + 8, 12345.0f);
  r.trip.assign(m + 8, 12345.0f);
  r.kept.assign(m + 8, 12345.0f);
  r.relu_out.assign(m + 8, bf16_of_bits(0x1234));
  r.bits.assign(nv::bit_words(static_cast<int64_t>(m)) + 1, 0xa5a5);
  return r;
}

bool same(float a, float b) { return std::isnan(a) ? std::isnan(b) : float_bits(a) == float_bits(b); }
bool same(BFloat16 a, BFloat16 b) {
  const bool nan_a = (a.bits & 0x7fff) > 0x7f80, nan_b = (b.bits & 0x7fff) > 0x7f80;
  return nan_a ? nan_b : a.bits == b.bits;
}

template <class T>
void check_equal(const std::vector<T>& wide, const std::vector<T>& ref, const char* what,
                 const std::string& where) {
  REQUIRE(wide.size() == ref.size());
  for (size_t i = 0; i < wide.size(); ++i) {
    if (!same(wide[i], ref[i])) {
      FAIL_CHECK(what << " differs at value " << i << " of " << where);
      return;
    }
  }
}

// Runs `wide` and the scalar program on the same rows and compares every output.
template <class Run>
void check_width(Run wide, const char* name) {
  for (int64_t offset : {0, 3}) {
    for (int64_t m = 0; m <= 40; ++m) {
      for (uint32_t seed = 1; seed <= 40; seed += 13) {
        Row a = make_row(640, static_cast<size_t>(m), seed), b = a;
        for (int64_t start = 0; start + offset + m <= 600; start += 61) {
          wide(a, start + offset, m);
          run_scalar(b, start + offset, m);
          std::ostringstream where;
          where << name << " row of " << m << " at " << start + offset << ", seed " << seed;
          check_equal(a.fma_out, b.fma_out, "fma", where.str());
          check_equal(a.trip, b.trip, "round_trip", where.str());
          check_equal(a.relu_out, b.relu_out, "relu stored as bf16", where.str());
          check_equal(a.kept, b.kept, "keep(load_bits)", where.str());
          REQUIRE(a.bits.size() == b.bits.size());
          for (size_t w = 0; w < a.bits.size(); ++w) {
            // The word after the row (a guard) must be untouched; inside it, every bit.
            CHECK_MESSAGE(a.bits[w] == b.bits[w], "mask word ", w, " of ", where.str());
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("bf16 row lanes: the scalar program keeps its guards and rounds as BFloat16") {
  Row r = make_row(640, 5, 1);
  r.f[0] = 1.0f;
  r.g[0] = bits_float(0x00008000u);  // 1 - g: rounds to 1.0 in bf16
  r.f[1] = -2.0f;
  run_scalar(r, 0, 5);
  CHECK(r.trip[0] == 1.0f);
  CHECK(r.relu_out[1].bits == BFloat16(std::fmax(-2.0f + static_cast<float>(r.b[1]), 0.0f)).bits);
  CHECK((r.bits[0] & 1u) == 1u);
  CHECK((r.bits[0] & 2u) == 0u);
  CHECK((r.bits[0] >> 5) == 0u);  // bits past the row are 0
  CHECK(r.fma_out[5] == 12345.0f);
  CHECK(r.relu_out[5].bits == 0x1234);
  CHECK(r.bits[1] == 0xa5a5);
}

#if LOCKSTEP_BF16_LANES_AVX2
TEST_CASE("bf16 row lanes: AVX2 (8 floats) gives the scalar lanes' bits") { check_width(run_avx2, "avx2"); }
#endif

#if LOCKSTEP_BF16_ROWS_AVX512
TEST_CASE("bf16 row lanes: AVX-512 (16 floats) gives the scalar lanes' bits") {
  check_width(run_avx512, "avx512");
}
#endif
