// tests/core/test_gemm_bf16_avx2.cpp — Note [bf16 GEMM in AVX2 registers]
// (core/native/fast/gemm_bf16_avx2.cpp) against gemm_bf16_reference, value by value:
// both transposes, float32 and bf16 C, beta 0 (C never read: it holds NaNs) and
// not, with and without a bias, padded leading dimensions whose padding must
// stay untouched, and sizes around every block edge (the 6 x 16 micro-tile, the
// 96-row A block, the 1024-column B block, K one block or several). A float32 C
// agrees with the loops up to the order of the sums; a bf16 C to one rounding of
// that, and exactly the float32 C rounded once to nearest even (the sums are the
// same either way). Where the build has no AVX2 + FMA the kernel must decline every call.
// The dispatch through gemm_bf16 is covered by the "*gemm_bf16*" cases run with
// LOCKSTEP_ONEDNN_BF16=0 (tests/CMakeLists.txt).
// Read before: core/native/fast/gemm_bf16_avx2.h, core/native/gemm_bf16.h.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "core/native/fast/gemm_bf16_avx2.h"
#include "core/native/gemm_bf16.h"
#include "core/parallel.h"

namespace nv = lockstep::native;
using lockstep::BFloat16;

namespace {

struct Shape {
  int64_t m, n, k;
};

std::vector<BFloat16> random_bf16(size_t count, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<BFloat16> v(count);
  for (BFloat16& x : v) x = BFloat16(dist(rng));
  return v;
}

float as_float(float x) { return x; }
float as_float(BFloat16 x) { return static_cast<float>(x); }

// One call of the kernel against the loops; returns the number of values checked.
template <class Out>
int64_t check_one(Shape s, bool trans_a, bool trans_b, float beta, bool with_bias,
                  std::mt19937& rng) {
  const int64_t pad = 3;  // every leading dimension padded
  const int64_t lda = (trans_a ? s.m : s.k) + pad, ldb = (trans_b ? s.k : s.n) + pad,
                ldc = s.n + pad;
  const std::vector<BFloat16> a = random_bf16(static_cast<size_t>((trans_a ? s.k : s.m) * lda), rng);
  const std::vector<BFloat16> b = random_bf16(static_cast<size_t>((trans_b ? s.n : s.k) * ldb), rng);
  const std::vector<BFloat16> bias = random_bf16(static_cast<size_t>(s.n), rng);
  const BFloat16* bias_p = with_bias ? bias.data() : nullptr;
  // C: random where beta reads it, NaN where it must not be read; padding a sentinel.
  const float sentinel = 12345.0f;
  std::vector<Out> c(static_cast<size_t>(s.m * ldc), Out(sentinel));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      c[i * ldc + j] = Out(beta != 0.0f ? dist(rng) : std::numeric_limits<float>::quiet_NaN());
    }
  }
  std::vector<Out> ref = c;
  if (beta == 0.0f) {
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) ref[i * ldc + j] = Out(0.0f);
    }
  }
  nv::gemm_bf16_reference<Out>(trans_a, trans_b, s.m, s.n, s.k, a.data(), lda, b.data(), ldb,
                               beta, ref.data(), ldc, bias_p);
  const bool ran = nv::detail::gemm_bf16_avx2<Out>(trans_a, trans_b, s.m, s.n, s.k, a.data(), lda,
                                                   b.data(), ldb, beta, c.data(), ldc, bias_p);
  REQUIRE(ran == nv::detail::gemm_bf16_avx2_available());
  if (!ran) return 0;
  int64_t checked = 0, bad = 0;
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = as_float(c[i * ldc + j]), want = as_float(ref[i * ldc + j]);
      if (j >= s.n) {  // padding: untouched
        if (got != as_float(Out(sentinel))) ++bad;
        continue;
      }
      // The sums' order differs: a bound from the magnitudes the sum goes through.
      float magnitude = std::abs(beta) * 4.0f + (with_bias ? 4.0f : 0.0f);
      for (int64_t p = 0; p < s.k; ++p) {
        const float x = static_cast<float>(trans_a ? a[p * lda + i] : a[i * lda + p]);
        const float y = static_cast<float>(trans_b ? b[j * ldb + p] : b[p * ldb + j]);
        magnitude += std::abs(x * y);
      }
      float tol = 4e-7f * magnitude * std::sqrt(static_cast<float>(s.k) + 1.0f) + 1e-6f;
      if constexpr (std::is_same_v<Out, BFloat16>) tol += std::abs(want) * (1.0f / 128.0f);
      if (!(std::abs(got - want) <= tol)) {
        if (bad < 5) {
          MESSAGE("C(", i, ", ", j, ") = ", got, ", the loops give ", want, " (tolerance ", tol, ")");
        }
        ++bad;
      }
      ++checked;
    }
  }
  CHECK(bad == 0);
  return checked;
}

template <class Out>
void check_shapes(const std::vector<Shape>& shapes) {
  std::mt19937 rng(11);
  int64_t checked = 0;
  for (const Shape& s : shapes) {
    for (bool trans_a : {false, true}) {
      for (bool trans_b : {false, true}) {
        for (float beta : {0.0f, 0.5f}) {
          for (bool with_bias : {false, true}) {
            CAPTURE(s.m);
            CAPTURE(s.n);
            CAPTURE(s.k);
            CAPTURE(trans_a);
            CAPTURE(trans_b);
            CAPTURE(beta);
            CAPTURE(with_bias);
            checked += check_one<Out>(s, trans_a, trans_b, beta, with_bias, rng);
          }
        }
      }
    }
  }
  if (nv::detail::gemm_bf16_avx2_available()) CHECK(checked > 0);
}

// Around the micro-tile (6 x 16), the A block (96 rows) and the K block (one
// block up to 384, else blocks of 256 and a remainder); K not a multiple of 8
// takes the packing's scalar tail.
const std::vector<Shape> kSmall = {{1, 1, 1},    {5, 15, 7},   {6, 16, 8},   {7, 17, 9},
                                   {13, 33, 64}, {97, 40, 19}, {96, 16, 384}, {20, 24, 385},
                                   {31, 18, 600}};

}  // namespace

TEST_CASE("gemm_bf16_avx2: float32 C equals the reference loops at every block edge") {
  check_shapes<float>(kSmall);
}

TEST_CASE("gemm_bf16_avx2: bf16 C equals the reference loops to one rounding") {
  check_shapes<BFloat16>(kSmall);
}

TEST_CASE("gemm_bf16_avx2: more than one B block and two threads give the same values") {
  // n past the 1024-column B block, m past several A blocks (the threads split them).
  const std::vector<Shape> wide = {{200, 1100, 40}};
  const int threads = lockstep::get_num_threads();
  for (int t : {1, 2}) {
    lockstep::set_num_threads(t);
    CAPTURE(t);
    check_shapes<float>(wide);
    check_shapes<BFloat16>(wide);
  }
  lockstep::set_num_threads(threads);
}

TEST_CASE("gemm_bf16_avx2: several K blocks, C in chunks past both chunk edges") {
  // K > 384 takes blocks of 256; C then goes 1024 columns x (4 MiB / 4 KiB) = 1024
  // rows at a time: 1030 x 1030 crosses both edges.
  std::mt19937 rng(12);
  const Shape s{1030, 1030, 390};
  const int64_t expected = nv::detail::gemm_bf16_avx2_available() ? s.m * s.n : 0;
  CHECK(check_one<float>(s, false, true, 0.5f, true, rng) == expected);
  CHECK(check_one<BFloat16>(s, true, false, 0.5f, true, rng) == expected);
  CHECK(check_one<BFloat16>(s, false, false, 0.0f, false, rng) == expected);
}

TEST_CASE("gemm_bf16_avx2: a bf16 C is the float32 C rounded once, to nearest even") {
  // The same sums in the same order either way (beta 0: C not read), so the bf16 result
  // must be exactly the float32 one rounded as BFloat16 rounds: K one block (the
  // epilogue's rounding from the registers, whole tiles and cut ones) and several
  // (the float32 scratch, then the rounding pass).
  std::mt19937 rng(13);
  for (const Shape& s : std::vector<Shape>{{13, 37, 64}, {50, 40, 500}}) {
    for (bool with_bias : {false, true}) {
      CAPTURE(s.k);
      CAPTURE(with_bias);
      const std::vector<BFloat16> a = random_bf16(static_cast<size_t>(s.m * s.k), rng);
      const std::vector<BFloat16> b = random_bf16(static_cast<size_t>(s.k * s.n), rng);
      const std::vector<BFloat16> bias = random_bf16(static_cast<size_t>(s.n), rng);
      const BFloat16* bias_p = with_bias ? bias.data() : nullptr;
      std::vector<float> c32(static_cast<size_t>(s.m * s.n));
      std::vector<BFloat16> c16(c32.size());
      const bool ran32 = nv::detail::gemm_bf16_avx2<float>(false, false, s.m, s.n, s.k, a.data(), s.k,
                                                           b.data(), s.n, 0.0f, c32.data(), s.n, bias_p);
      const bool ran16 = nv::detail::gemm_bf16_avx2<BFloat16>(false, false, s.m, s.n, s.k, a.data(),
                                                              s.k, b.data(), s.n, 0.0f, c16.data(),
                                                              s.n, bias_p);
      REQUIRE(ran32 == nv::detail::gemm_bf16_avx2_available());
      REQUIRE(ran16 == ran32);
      if (!ran32) continue;
      int64_t differ = 0;
      for (size_t i = 0; i < c32.size(); ++i) {
        if (c16[i].bits != BFloat16::round_bits(c32[i])) ++differ;
      }
      CHECK(differ == 0);
    }
  }
}
