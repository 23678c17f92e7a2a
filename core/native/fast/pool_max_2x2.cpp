// core/native/fast/pool_max_2x2.cpp — the 2x2 stride-2 max-pool, one pass per output row.
//
// § Note [2x2 max-pool]
// Output (oy, ox) of a 2x2 stride-2 unpadded pool reads a = x[2oy][2ox],
// b = x[2oy][2ox + 1], c = x[2oy + 1][2ox], d = x[2oy + 1][2ox + 1]. The
// definition (Note [Max-pool fast path] in core/native/pool.cpp) visits them in
// that order keeping the first maximum, or the last NaN: starting from a, each
// of b, c, d is taken when it is greater or NaN. Here 16 outputs of a row are
// one AVX-512 step: the 32 inputs of each of the two rows are loaded (masked,
// so that rows of 14 or 7 outputs are one step with no tail), split into the
// even and odd columns, and compared with mask selects; the flat indices are
// built in int32 and widened to PyTorch's int64 on the store. A bf16 row needs
// no permute: each 32-bit lane of the loaded pair holds (odd << 16) | even, so
// a = lane << 16 and b = lane & 0xffff0000 are the two widened values, and the
// maximum narrows back exactly (it is one of them). Without AVX-512 (or for a
// plane too large for int32 positions) the side-by-side kernel of pool.cpp runs.
// The generic kernels compiled by GCC 12 for this window ran slower than
// pool.cpp's own (stride-2 int64 gathers); numbers in docs/results/kernel_choices.md.
//
// Read before: core/native/fast/pool_max_2x2.h.
#include "core/native/fast/pool_max_2x2.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define LOCKSTEP_POOL_2X2_AVX512 1
#endif

#include <algorithm>

#include "core/error.h"

namespace lockstep::native::detail {

#ifdef LOCKSTEP_POOL_2X2_AVX512

namespace {

// The first maximum of a, b, c, d (or their last NaN) and its offset in the window.
struct Best {
  __m512 value;
  __m512i at;  // int32: 0, 1, w or w + 1
};

inline Best best_of_four(__m512 a, __m512 b, __m512 c, __m512 d, int32_t w) {
  __m512 best = a;
  __m512i at = _mm512_setzero_si512();
  const __m512 vs[3] = {b, c, d};
  const int32_t offsets[3] = {1, w, w + 1};
  for (int k = 0; k < 3; ++k) {
    const __mmask16 take = _mm512_cmp_ps_mask(vs[k], best, _CMP_GT_OQ) |
                           _mm512_cmp_ps_mask(vs[k], vs[k], _CMP_UNORD_Q);
    best = _mm512_mask_mov_ps(best, take, vs[k]);
    at = _mm512_mask_mov_epi32(at, take, _mm512_set1_epi32(offsets[k]));
  }
  return {best, at};
}

// idx[0, m) = the int32 positions `pos`, widened to int64 in halves of 8 (the
// maskz_ forms: GCC 12 flags the plain ones with a false -Wmaybe-uninitialized).
inline void store_positions(int64_t* idx, __m512i pos, int64_t m) {
  const __mmask16 mask = static_cast<__mmask16>((1u << m) - 1u);
  const __m256i lo = _mm512_maskz_extracti64x4_epi64(0xF, pos, 0);
  const __m256i hi = _mm512_maskz_extracti64x4_epi64(0xF, pos, 1);
  _mm512_mask_storeu_epi64(idx, static_cast<__mmask8>(mask), _mm512_maskz_cvtepi32_epi64(0xFF, lo));
  _mm512_mask_storeu_epi64(idx + 8, static_cast<__mmask8>(mask >> 8),
                           _mm512_maskz_cvtepi32_epi64(0xFF, hi));
}

// 0, 2, 4, ..., 30: the even columns of 32, and each output's column offset.
inline __m512i even_lanes() {
  return _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
}

// The input-column mask of m outputs: 2m columns, as two 16-lane halves or one 32-lane mask.
inline __mmask32 column_mask(int64_t m) {
  return m == 16 ? ~__mmask32{0} : static_cast<__mmask32>((1u << (2 * m)) - 1u);
}

void rows_f32(const float* r0, const float* r1, int64_t ow, int32_t w, int32_t corner, float* out,
              int64_t* idx) {
  const __m512i even = even_lanes();  // also each output's column offset 2 * lane
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t ox = 0; ox < ow; ox += 16) {
    const int64_t m = std::min<int64_t>(16, ow - ox);
    const __mmask32 cols = column_mask(m);
    const auto lo = static_cast<__mmask16>(cols), hi = static_cast<__mmask16>(cols >> 16);
    const __m512 x0 = _mm512_maskz_loadu_ps(lo, r0 + 2 * ox);
    const __m512 x1 = _mm512_maskz_loadu_ps(hi, r0 + 2 * ox + 16);
    const __m512 y0 = _mm512_maskz_loadu_ps(lo, r1 + 2 * ox);
    const __m512 y1 = _mm512_maskz_loadu_ps(hi, r1 + 2 * ox + 16);
    const Best best =
        best_of_four(_mm512_permutex2var_ps(x0, even, x1), _mm512_permutex2var_ps(x0, odd, x1),
                     _mm512_permutex2var_ps(y0, even, y1), _mm512_permutex2var_ps(y0, odd, y1), w);
    _mm512_mask_storeu_ps(out + ox, static_cast<__mmask16>((1u << m) - 1u), best.value);
    const __m512i base =
        _mm512_add_epi32(_mm512_set1_epi32(corner + 2 * static_cast<int32_t>(ox)), even);
    store_positions(idx + ox, _mm512_add_epi32(base, best.at), m);
  }
}

void rows_bf16(const uint16_t* r0, const uint16_t* r1, int64_t ow, int32_t w, int32_t corner,
               uint16_t* out, int64_t* idx) {
  const __m512i high = _mm512_set1_epi32(static_cast<int32_t>(0xffff0000u));
  const __m512i lane2 = even_lanes();  // each output's column offset
  for (int64_t ox = 0; ox < ow; ox += 16) {
    const int64_t m = std::min<int64_t>(16, ow - ox);
    const __mmask32 cols = column_mask(m);
    const __m512i p0 = _mm512_maskz_loadu_epi16(cols, r0 + 2 * ox);  // lanes (odd << 16) | even
    const __m512i p1 = _mm512_maskz_loadu_epi16(cols, r1 + 2 * ox);
    const Best best = best_of_four(_mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, p0, 16)),
                                   _mm512_castsi512_ps(_mm512_and_si512(p0, high)),
                                   _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, p1, 16)),
                                   _mm512_castsi512_ps(_mm512_and_si512(p1, high)), w);
    const __m512i top = _mm512_maskz_srli_epi32(0xFFFF, _mm512_castps_si512(best.value), 16);
    const __m256i bits = _mm512_maskz_cvtepi32_epi16(0xFFFF, top);
    _mm256_mask_storeu_epi16(out + ox, static_cast<__mmask16>((1u << m) - 1u), bits);
    const __m512i base =
        _mm512_add_epi32(_mm512_set1_epi32(corner + 2 * static_cast<int32_t>(ox)), lane2);
    store_positions(idx + ox, _mm512_add_epi32(base, best.at), m);
  }
}

template <class S, class Rows>
void pool_planes(const S* x, const rules::PoolWindow& p, S* y, int64_t* idx, int64_t lo, int64_t hi,
                 Rows rows) {
  const auto w = static_cast<int32_t>(p.w);
  for (int64_t plane = lo; plane < hi; ++plane) {
    const S* src = x + plane * p.h * p.w;
    for (int64_t oy = 0; oy < p.oh; ++oy) {
      const int64_t o = (plane * p.oh + oy) * p.ow;
      rows(src + 2 * oy * p.w, src + (2 * oy + 1) * p.w, p.ow, w,
           static_cast<int32_t>(2 * oy * p.w), y + o, idx + o);
    }
  }
}

}  // namespace

bool max_pool_2x2_applies(const rules::PoolWindow& p) {
  return p.kh == 2 && p.kw == 2 && p.sh == 2 && p.sw == 2 && p.ph == 0 && p.pw == 0 && p.oh > 0 &&
         p.ow > 0 && p.h * p.w < (int64_t{1} << 31);
}

void max_pool_2x2_planes(const float* x, const rules::PoolWindow& p, float* y, int64_t* idx,
                         int64_t plane_lo, int64_t plane_hi) {
  pool_planes(x, p, y, idx, plane_lo, plane_hi, rows_f32);
}

void max_pool_2x2_planes(const BFloat16* x, const rules::PoolWindow& p, BFloat16* y, int64_t* idx,
                         int64_t plane_lo, int64_t plane_hi) {
  pool_planes(reinterpret_cast<const uint16_t*>(x), p, reinterpret_cast<uint16_t*>(y), idx,
              plane_lo, plane_hi, rows_bf16);
}

#else  // no AVX-512: the side-by-side kernel of pool.cpp takes these windows

bool max_pool_2x2_applies(const rules::PoolWindow&) { return false; }

void max_pool_2x2_planes(const float*, const rules::PoolWindow&, float*, int64_t*, int64_t,
                         int64_t) {
  LS_CHECK(false, "max_pool_2x2_planes: this build has no AVX-512 (check max_pool_2x2_applies)");
}

void max_pool_2x2_planes(const BFloat16*, const rules::PoolWindow&, BFloat16*, int64_t*, int64_t,
                         int64_t) {
  LS_CHECK(false, "max_pool_2x2_planes: this build has no AVX-512 (check max_pool_2x2_applies)");
}

#endif

}  // namespace lockstep::native::detail
