// core/native/fast/transpose_tiles.cpp — 16 x 16 transposes of 32-bit lanes, and 16-bit
// elements paired into them.
//
// § Note [Transposing in registers]
// Source rows are the destination's columns: d[i][j] = s[j][i] (leading
// dimensions lds and ldd). Four-byte elements go 16 x 16 at a time: sixteen
// source rows are loaded (16 lanes each), transposed in four rounds of
// shuffles (32-bit and 64-bit interleaves within 128-bit lanes, then two
// rounds of 128-bit lane shuffles: 64 shuffles a tile), and stored as sixteen
// destination rows. Two-byte elements pair up first: source rows 2k and 2k + 1
// become one row of 32-bit words (row 2k's element in the low half, 2k + 1's in
// the high half), so a 16 x 16 transpose of those words yields, in each output
// register, 32 consecutive two-byte elements of one destination row — a tile
// of 16 destination rows x 32 columns. A tile cut by an edge loads and stores
// under masks (missing source rows read as zeros that are never stored), so a
// (64, 49) image of a 7x7 layer is not a third scalar tail. Only bytes move, so the
// result equals the element loop exactly (tests/core/test_bf16_kernels.cpp
// compares every copy path with the offset walk, byte for byte). What the
// element loop cost for the NCHW <-> NHWC bf16 transposes around oneDNN's
// convolutions: docs/results/kernel_choices.md.
// With AVX2 only (the Zen 3, Xeons without AVX-512) the same scheme runs 8 x 8:
// eight 8-lane rows, three rounds (32- and 64-bit interleaves, one 128-bit lane
// shuffle), two-byte elements paired as above into tiles of 8 destination rows
// x 16 columns. AVX2 has no 16-bit masked loads, so whole tiles go through
// registers and the edges (a 7x7 layer's 49 pixels: the last one) through the
// element loop. The same tiles convert on the way where copy_ transposes between
// bf16 and float32 (the float32 path of bf16 convolutions on such CPUs: Note
// [bf16 without oneDNN kernels]): bf16 rows widened as they are loaded, or float
// rows rounded as they are stored, one pass instead of a conversion and a
// transpose.
//
// Read before: core/native/fast/transpose_tiles.h.
#include "core/native/fast/transpose_tiles.h"

#include <algorithm>
#include <type_traits>

#include "core/native/fast/bf16_lanes.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define LOCKSTEP_TRANSPOSE_AVX512 1
#endif
#if LOCKSTEP_BF16_LANES_AVX2  // AVX2 and FMA (fast/bf16_lanes.h)
#include <immintrin.h>
#define LOCKSTEP_TRANSPOSE_AVX2 1
#endif

namespace lockstep::native::detail {

namespace {

#ifdef LOCKSTEP_TRANSPOSE_AVX512

// r[0..16) rows of 16 32-bit lanes -> r[e] = column e of the input.
// (The maskz_ forms with every lane set: GCC 12 warns of uninitialised values
// inside the plain intrinsics.)
inline void transpose_16x16(__m512i r[16]) {
  constexpr __mmask16 k16 = 0xffff;
  constexpr __mmask8 k8 = 0xff;
  __m512i t[16], u[16];
  for (int p = 0; p < 8; ++p) {  // 32-bit interleave of row pairs
    t[2 * p] = _mm512_maskz_unpacklo_epi32(k16, r[2 * p], r[2 * p + 1]);
    t[2 * p + 1] = _mm512_maskz_unpackhi_epi32(k16, r[2 * p], r[2 * p + 1]);
  }
  for (int q = 0; q < 4; ++q) {  // 64-bit interleave: u[4q + e] lane L = column 4L + e, rows 4q..
    u[4 * q] = _mm512_maskz_unpacklo_epi64(k8, t[4 * q], t[4 * q + 2]);
    u[4 * q + 1] = _mm512_maskz_unpackhi_epi64(k8, t[4 * q], t[4 * q + 2]);
    u[4 * q + 2] = _mm512_maskz_unpacklo_epi64(k8, t[4 * q + 1], t[4 * q + 3]);
    u[4 * q + 3] = _mm512_maskz_unpackhi_epi64(k8, t[4 * q + 1], t[4 * q + 3]);
  }
  for (int e = 0; e < 4; ++e) {  // gather each column's four 128-bit pieces
    const __m512i p0 = _mm512_maskz_shuffle_i32x4(k16, u[e], u[4 + e], 0x44);
    const __m512i p1 = _mm512_maskz_shuffle_i32x4(k16, u[e], u[4 + e], 0xEE);
    const __m512i p2 = _mm512_maskz_shuffle_i32x4(k16, u[8 + e], u[12 + e], 0x44);
    const __m512i p3 = _mm512_maskz_shuffle_i32x4(k16, u[8 + e], u[12 + e], 0xEE);
    r[e] = _mm512_maskz_shuffle_i32x4(k16, p0, p2, 0x88);
    r[4 + e] = _mm512_maskz_shuffle_i32x4(k16, p0, p2, 0xDD);
    r[8 + e] = _mm512_maskz_shuffle_i32x4(k16, p1, p3, 0x88);
    r[12 + e] = _mm512_maskz_shuffle_i32x4(k16, p1, p3, 0xDD);
  }
}

// The first n (<= 16, or <= 32 for the 32-bit masks) lanes.
inline __mmask16 first16(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}
inline __mmask32 first32(int64_t n) {
  return n >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1u);
}

void transpose_4byte(const uint32_t* s, int64_t lds, uint32_t* d, int64_t ldd, int64_t rows,
                     int64_t cols) {
  for (int64_t i0 = 0; i0 < rows; i0 += 16) {
    const int64_t ni = std::min<int64_t>(16, rows - i0);  // a tile cut by an edge is masked
    const __mmask16 ki = first16(ni);
    for (int64_t j0 = 0; j0 < cols; j0 += 16) {
      const int64_t nj = std::min<int64_t>(16, cols - j0);
      __m512i r[16];
      for (int k = 0; k < 16; ++k) {
        r[k] = k < nj ? _mm512_maskz_loadu_epi32(ki, s + (j0 + k) * lds + i0) : _mm512_setzero_si512();
      }
      transpose_16x16(r);
      const __mmask16 kj = first16(nj);
      for (int e = 0; e < ni; ++e) _mm512_mask_storeu_epi32(d + (i0 + e) * ldd + j0, kj, r[e]);
    }
  }
}

void transpose_2byte(const uint16_t* s, int64_t lds, uint16_t* d, int64_t ldd, int64_t rows,
                     int64_t cols) {
  constexpr __mmask16 kAll = 0xffff;  // maskz_ forms: GCC 12 warns inside the plain ones
  for (int64_t i0 = 0; i0 < rows; i0 += 16) {
    const int64_t ni = std::min<int64_t>(16, rows - i0);  // a tile cut by an edge is masked
    const __mmask16 ki = first16(ni);
    for (int64_t j0 = 0; j0 < cols; j0 += 32) {
      const int64_t nj = std::min<int64_t>(32, cols - j0);
      __m512i r[16];
      for (int k = 0; k < 16; ++k) {  // source rows 2k, 2k + 1 -> one row of words
        const __m256i lo = 2 * k < nj ? _mm256_maskz_loadu_epi16(ki, s + (j0 + 2 * k) * lds + i0)
                                      : _mm256_setzero_si256();
        const __m256i hi = 2 * k + 1 < nj
                               ? _mm256_maskz_loadu_epi16(ki, s + (j0 + 2 * k + 1) * lds + i0)
                               : _mm256_setzero_si256();
        const __m512i a = _mm512_maskz_cvtepu16_epi32(kAll, lo);
        const __m512i b = _mm512_maskz_cvtepu16_epi32(kAll, hi);
        r[k] = _mm512_or_si512(a, _mm512_maskz_slli_epi32(kAll, b, 16));
      }
      transpose_16x16(r);
      const __mmask32 kj = first32(nj);
      for (int e = 0; e < ni; ++e) _mm512_mask_storeu_epi16(d + (i0 + e) * ldd + j0, kj, r[e]);
    }
  }
}

#endif

#ifdef LOCKSTEP_TRANSPOSE_AVX2

// d[i * ldd + j] = s[i + j * lds] (converted as convert<D>: a bf16 widened
// exactly, a float rounded as BFloat16::round_bits) for i in [i0, i1), j in
// [j0, j1): the element loop, for the edges.
template <class S, class D>
void transpose_edge(const S* s, int64_t lds, D* d, int64_t ldd, int64_t i0, int64_t i1,
                    int64_t j0, int64_t j1) {
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t j = j0; j < j1; ++j) {
      if constexpr (std::is_same_v<S, D>) {
        d[i * ldd + j] = s[i + j * lds];
      } else {
        d[i * ldd + j] = static_cast<D>(static_cast<float>(s[i + j * lds]));
      }
    }
  }
}

// The whole tiles of 8 destination rows x kCols columns: load(r, t) fills r from
// the tile whose first source element is t, which is transposed, and store(p, v)
// writes each of the 8 registers as a destination row from p; then the edges, by
// the element loop.
template <int64_t kCols, class S, class D, class Load, class Store>
void transpose_tiles_avx2(const S* s, int64_t lds, D* d, int64_t ldd, int64_t rows, int64_t cols,
                          Load load, Store store) {
  const int64_t rows8 = rows / 8 * 8, whole = cols / kCols * kCols;
  for (int64_t i0 = 0; i0 < rows8; i0 += 8) {
    for (int64_t j0 = 0; j0 < whole; j0 += kCols) {
      __m256 r[8];
      load(r, s + j0 * lds + i0);
      transpose_8x8(r);
      for (int e = 0; e < 8; ++e) store(d + (i0 + e) * ldd + j0, r[e]);
    }
  }
  transpose_edge(s, lds, d, ldd, 0, rows8, whole, cols);
  transpose_edge(s, lds, d, ldd, rows8, rows, 0, cols);
}

template <class T>
void store_row(T* p, __m256 v) {  // 32 bytes as they are
  _mm256_storeu_ps(reinterpret_cast<float*>(p), v);
}

void transpose_4byte_avx2(const uint32_t* s, int64_t lds, uint32_t* d, int64_t ldd, int64_t rows,
                          int64_t cols) {
  transpose_tiles_avx2<8>(s, lds, d, ldd, rows, cols, [lds](__m256 r[8], const uint32_t* t) {
    for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(reinterpret_cast<const float*>(t + k * lds));
  }, store_row<uint32_t>);
}

void transpose_2byte_avx2(const uint16_t* s, int64_t lds, uint16_t* d, int64_t ldd, int64_t rows,
                          int64_t cols) {
  transpose_tiles_avx2<16>(s, lds, d, ldd, rows, cols, [lds](__m256 r[8], const uint16_t* t) {
    for (int k = 0; k < 8; ++k) {  // source rows 2k, 2k + 1 -> one row of words
      const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t + 2 * k * lds));
      const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t + (2 * k + 1) * lds));
      r[k] = _mm256_castsi256_ps(
          _mm256_set_m128i(_mm_unpackhi_epi16(lo, hi), _mm_unpacklo_epi16(lo, hi)));
    }
  }, store_row<uint16_t>);
}

// The converting transposes: 8 bf16 of a source row widened into a register
// (lanes_avx2::load), or a transposed register rounded into 8 bf16
// (lanes_avx2::store), with bf16_lanes.h's bits.
void transpose_widen_avx2(const BFloat16* s, int64_t lds, float* d, int64_t ldd, int64_t rows,
                          int64_t cols) {
  transpose_tiles_avx2<8>(s, lds, d, ldd, rows, cols, [lds](__m256 r[8], const BFloat16* t) {
    for (int k = 0; k < 8; ++k) r[k] = lanes_avx2::load(t + k * lds, lanes_avx2::kAll);
  }, store_row<float>);
}

void transpose_round_avx2(const float* s, int64_t lds, BFloat16* d, int64_t ldd, int64_t rows,
                          int64_t cols) {
  transpose_tiles_avx2<8>(s, lds, d, ldd, rows, cols, [lds](__m256 r[8], const float* t) {
    for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(t + k * lds);
  }, [](BFloat16* p, __m256 v) { lanes_avx2::store(p, lanes_avx2::kAll, v); });
}

#endif

}  // namespace

bool transpose_block_available(int64_t elem_size) {
#if defined(LOCKSTEP_TRANSPOSE_AVX512) || defined(LOCKSTEP_TRANSPOSE_AVX2)
  return elem_size == 2 || elem_size == 4;
#else
  (void)elem_size;
  return false;
#endif
}

bool transpose_block_avx2(const void* s, int64_t lds, void* d, int64_t ldd, int64_t rows,
                          int64_t cols, int64_t elem_size) {
#ifdef LOCKSTEP_TRANSPOSE_AVX2
  if (elem_size == 4) {
    transpose_4byte_avx2(static_cast<const uint32_t*>(s), lds, static_cast<uint32_t*>(d), ldd,
                         rows, cols);
    return true;
  }
  if (elem_size == 2) {
    transpose_2byte_avx2(static_cast<const uint16_t*>(s), lds, static_cast<uint16_t*>(d), ldd,
                         rows, cols);
    return true;
  }
#endif
  (void)s, (void)lds, (void)d, (void)ldd, (void)rows, (void)cols, (void)elem_size;
  return false;
}

bool transpose_block(const void* s, int64_t lds, void* d, int64_t ldd, int64_t rows, int64_t cols,
                     int64_t elem_size) {
#ifdef LOCKSTEP_TRANSPOSE_AVX512
  if (elem_size == 4) {
    transpose_4byte(static_cast<const uint32_t*>(s), lds, static_cast<uint32_t*>(d), ldd, rows,
                    cols);
    return true;
  }
  if (elem_size == 2) {
    transpose_2byte(static_cast<const uint16_t*>(s), lds, static_cast<uint16_t*>(d), ldd, rows,
                    cols);
    return true;
  }
#endif
  return transpose_block_avx2(s, lds, d, ldd, rows, cols, elem_size);
}

bool transpose_widen_bf16(const BFloat16* s, int64_t lds, float* d, int64_t ldd, int64_t rows,
                          int64_t cols) {
#ifdef LOCKSTEP_TRANSPOSE_AVX2
  transpose_widen_avx2(s, lds, d, ldd, rows, cols);
  return true;
#else
  (void)s, (void)lds, (void)d, (void)ldd, (void)rows, (void)cols;
  return false;
#endif
}

bool transpose_round_bf16(const float* s, int64_t lds, BFloat16* d, int64_t ldd, int64_t rows,
                          int64_t cols) {
#ifdef LOCKSTEP_TRANSPOSE_AVX2
  transpose_round_avx2(s, lds, d, ldd, rows, cols);
  return true;
#else
  (void)s, (void)lds, (void)d, (void)ldd, (void)rows, (void)cols;
  return false;
#endif
}

}  // namespace lockstep::native::detail
