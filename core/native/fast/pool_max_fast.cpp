// core/native/fast/pool_max_fast.cpp — max_pool2d's float32 fast paths (declared in
// pool_max_fast.h): the separable forward and the streamed backward scatter.
//
// § Note [Separable max-pool]
// max_pool2d's result for one window (Note [Max-pool fast path] in ../pool.cpp) is
// the element a scan in row-major order keeps with `take if v > best or v is
// NaN`, starting from -inf at the window's first in-plane position. That is:
// the last NaN in row-major order if the window has one, else the first maximum
// in row-major order (and the first position when every value is -inf). Both
// can be found row by row: scan each window row alone with the same rule, then
// scan the rows' results, top to bottom, with the same rule again. A NaN row
// result means the row has a NaN and is its last one, so the last NaN row wins
// with its last NaN; otherwise the first row reaching the maximum wins with its
// first maximum; an all -inf window keeps its first position. (Columns first
// would not do: it finds the first maximum in column-major order, so ties would
// pick other positions.) The row scans are shared: with kernel 3 stride 2 each
// input row serves up to two output rows, so each is scanned once into a ring
// of kh rows of (maximum, flat position), indexed by input row % kh.
//
// Each pass is vectorized over 16 output columns. The row pass reads
// line[ox * sw + kj] for the 16 ox: for stride 2 the even lanes of 32
// consecutive floats (one permutex2var), for stride 1 a plain load; other
// strides, and machines without AVX-512, run the same scan as plain loops. The
// input row is first copied into a `line` between -inf padding (-inf never wins,
// and lanes past the output row read -inf and are never stored); two lines take
// turns so that a row is copied while the row before it is scanned (scanning
// right after the copy stalled on the copy's stores). The
// column pass reads the ring rows contiguously. Indices are int32 in the passes
// and widened to int64 on the store. Rows without NaN or infinity (checked
// while copying) leave out the `v is NaN` compare.
//
// Memory, not arithmetic, bounds the stem pool: it reads the input once and
// writes values and twice as many bytes of int64 indices. The indices are
// written with streaming stores (Note [Streaming stores]; they are read only by
// the backward, much later), input rows are prefetched a few rows ahead, and the
// backward sums each plane in a cached buffer that it streams out, prefetching
// indices and gradients ahead.
//
// Results are bit for bit those of the plain loops (tests/core/test_pool.cpp);
// the times, on ResNet50's stem pool with and without AVX-512, are in
// docs/results/kernel_choices.md. The side-by-side windows of the small CNN
// (2x2 stride 2, rows of 14 or 7) stay in pool.cpp, where whole rows share a
// vector (the separable path was slower there).
//
// Read before: core/native/fast/pool_max_fast.h. Read next: core/native/batch_norm.cpp.
#include "core/native/fast/pool_max_fast.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#if defined(__AVX512F__) || defined(__SSE__)
#include <immintrin.h>
#endif

#include "core/native/fast/streaming_store.h"

namespace lockstep::native::detail {

namespace {

using rules::PoolWindow;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kLanes = 16;  // floats in an AVX-512 vector

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// The buffers of one separable_max_pool_planes call, reused across its planes.
// Output rows are padded to owp = ow rounded up to 16 so vectors never need a tail.
struct Scratch {
  explicit Scratch(const PoolWindow& p)
      : owp(round_up(p.ow, kLanes)),
        line_len(std::max(p.w + 2 * p.pw, p.sw * owp + p.kw) + 2 * kLanes),
        lines(static_cast<size_t>(2 * line_len), kNegInf),
        ring_max(static_cast<size_t>(p.kh * owp), kNegInf),
        ring_at(static_cast<size_t>(p.kh * owp), 0),
        ring_row(static_cast<size_t>(p.kh), -1),
        ring_special(static_cast<size_t>(p.kh), 1),
        window_max(static_cast<size_t>(p.kh)),
        window_at(static_cast<size_t>(p.kh)),
        first_col(static_cast<size_t>(owp), 0),
        cols(static_cast<size_t>(p.kw * owp), 0),
        best(static_cast<size_t>(owp)),
        best_at(static_cast<size_t>(owp)) {
    for (int64_t ox = 0; ox < p.ow; ++ox) {
      first_col[ox] = static_cast<int32_t>(std::max<int64_t>(ox * p.sw - p.pw, 0));
      for (int64_t kj = 0; kj < p.kw; ++kj) {
        cols[kj * owp + ox] = static_cast<int32_t>(ox * p.sw - p.pw + kj);
      }
    }
  }
  int64_t owp;
  // Two lines, each one input row at [pw, pw + w) with -inf around it: row iy
  // goes to line iy % 2, copied while the row before is scanned (see stage_line).
  int64_t line_len;
  std::vector<float> lines;
  int64_t line_row[2] = {-1, -1};       // which input row each line holds (-1: none)
  bool line_special[2] = {true, true};  // whether it holds NaN or inf
  // The ring of row maxima: slot iy % kh holds input row iy's (owp) maxima, their
  // flat positions in the plane, and whether the row holds a NaN or an infinity.
  std::vector<float> ring_max;
  std::vector<int32_t> ring_at;
  std::vector<int64_t> ring_row;  // which input row each slot holds (-1: none)
  std::vector<char> ring_special;
  // The current output row's window rows, top to bottom (pointers into the ring).
  std::vector<const float*> window_max;
  std::vector<const int32_t*> window_at;
  std::vector<int32_t> first_col;  // (owp): first in-plane column of each output's window
  std::vector<int32_t> cols;       // (kw, owp): plane column of window column kj of output ox
  std::vector<float> best;         // (owp): the portable column pass's running maxima
  std::vector<int32_t> best_at;    // (owp): and their flat positions
};

// Rows are prefetched this far ahead (into the next plane at the end of one):
// the hardware prefetcher alone left the forward waiting on memory
// (measured on the stem pool: docs/results/kernel_choices.md).
constexpr int64_t kPrefetchRows = 8;

// The backward's scatter prefetches its inputs this many elements ahead.
constexpr int64_t kScatterPrefetch = 2048;

// Asks for the cache line at base + byte_offset to be brought into L1. A
// prefetch never faults, so it may point past the end of the data; the address
// is formed without pointer arithmetic for that reason.
inline void prefetch_bytes(const void* base, int64_t byte_offset) {
#if defined(__AVX512F__) || defined(__SSE__)
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(base) +
                                             static_cast<uintptr_t>(byte_offset)),
               _MM_HINT_T0);
#else
  (void)base;
  (void)byte_offset;
#endif
}

// Prefetches the w floats at x + offset (see prefetch_bytes).
void prefetch_row(const float* x, int64_t offset, int64_t w) {
  for (int64_t b = 0; b < w * int64_t{sizeof(float)}; b += 64) {
    prefetch_bytes(x, offset * int64_t{sizeof(float)} + b);
  }
}

// Copies input row `src` (w floats) into the line, between its padding; returns
// whether it holds a NaN or an infinity (always true without AVX-512, where it
// is not used).
bool load_line(const float* src, const PoolWindow& p, float* line) {
#if defined(__AVX512F__)
  // x * 0 is 0 for finite x and NaN for NaN and +-inf; the sum stays 0 if all are finite.
  __m512 acc = _mm512_setzero_ps();
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t j = 0; j < p.w; j += kLanes) {
    const int64_t rest = p.w - j;
    const auto keep = static_cast<__mmask16>(rest >= kLanes ? 0xFFFF : (1u << rest) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(keep, src + j);
    _mm512_mask_storeu_ps(line + p.pw + j, keep, v);
    acc = _mm512_fmadd_ps(v, zero, acc);
  }
  return _mm512_cmp_ps_mask(acc, acc, _CMP_UNORD_Q) != 0;
#else
  std::memcpy(line + p.pw, src, static_cast<size_t>(p.w) * sizeof(float));
  return true;
#endif
}

// Row pass, portable: for each output column ox, the first maximum (or last NaN)
// of line[ox * sw + kj], kj < kw, and its flat position (base = iy * w plus its
// column); written with selects over whole rows so that compilers can vectorize
// it. kStride is sw, or 0 when not a compile-time constant.
template <int kStride>
void row_pass_portable(const float* __restrict line, const PoolWindow& p, const Scratch& s,
                       int32_t base, float* __restrict rm, int32_t* __restrict ra) {
  const int64_t sw = kStride != 0 ? kStride : p.sw;
  for (int64_t ox = 0; ox < p.ow; ++ox) {
    rm[ox] = kNegInf;
    ra[ox] = base + s.first_col[ox];
  }
  for (int64_t kj = 0; kj < p.kw; ++kj) {
    const float* src = line + kj;
    const int32_t* col = s.cols.data() + kj * s.owp;
    for (int64_t ox = 0; ox < p.ow; ++ox) {
      const float v = src[ox * sw], b = rm[ox];
      // All ones when v is taken (v != v: v is NaN); the int mask lets
      // compilers vectorize this even for SSE2 (a bool made them branch).
      const int32_t take = -static_cast<int32_t>((v > b) | (v != v));
      rm[ox] = take != 0 ? v : b;
      ra[ox] = (take & (base + col[ox])) | (~take & ra[ox]);
    }
  }
}

void row_pass_portable(const float* line, const PoolWindow& p, const Scratch& s, int32_t base,
                       float* rm, int32_t* ra) {
  if (p.sw == 1) {
    row_pass_portable<1>(line, p, s, base, rm, ra);
  } else if (p.sw == 2) {
    row_pass_portable<2>(line, p, s, base, rm, ra);
  } else {
    row_pass_portable<0>(line, p, s, base, rm, ra);
  }
}

// Column pass, portable: one output row from its `rows` window rows (s.window_*),
// starting from -inf at the window's first position (base0 = y0 * w plus its column).
void column_pass_portable(Scratch& s, const PoolWindow& p, int64_t rows, int32_t base0,
                          float* __restrict dst, int64_t* __restrict idx) {
  float* __restrict best = s.best.data();
  int32_t* __restrict at = s.best_at.data();
  for (int64_t ox = 0; ox < p.ow; ++ox) {
    best[ox] = kNegInf;
    at[ox] = base0 + s.first_col[ox];
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict rm = s.window_max[r];
    const int32_t* __restrict ra = s.window_at[r];
    for (int64_t ox = 0; ox < p.ow; ++ox) {
      const float v = rm[ox], b = best[ox];
      const int32_t take = -static_cast<int32_t>((v > b) | (v != v));  // as in the row pass
      best[ox] = take != 0 ? v : b;
      at[ox] = (take & ra[ox]) | (~take & at[ox]);
    }
  }
  for (int64_t ox = 0; ox < p.ow; ++ox) {
    dst[ox] = best[ox];
    idx[ox] = at[ox];
  }
}

#if defined(__AVX512F__)
// The scan's rule on 16 lanes: v > best (false for NaNs) or v is NaN. Where no
// NaN can occur (kSpecial false) the second compare is left out.
template <bool kSpecial>
inline __mmask16 take16(__m512 v, __m512 best) {
  const __mmask16 greater = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);
  if constexpr (kSpecial) return greater | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return greater;
}

// Row pass for stride kStride (1 or 2), 16 output columns at a time over owp.
template <int kStride, bool kSpecial>
void row_pass_avx512(const float* line, const PoolWindow& p, const Scratch& s, int32_t base,
                     float* rm, int32_t* ra) {
  const __m512i evens =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i vbase = _mm512_set1_epi32(base);
  for (int64_t ox0 = 0; ox0 < s.owp; ox0 += kLanes) {
    __m512 best = _mm512_set1_ps(kNegInf);
    __m512i at = _mm512_loadu_si512(s.first_col.data() + ox0);
    const float* src = line + ox0 * kStride;
    for (int64_t kj = 0; kj < p.kw; ++kj) {
      __m512 v;
      if constexpr (kStride == 2) {  // the even lanes of 32 floats
        v = _mm512_permutex2var_ps(_mm512_loadu_ps(src + kj), evens,
                                   _mm512_loadu_ps(src + kj + kLanes));
      } else {
        v = _mm512_loadu_ps(src + kj);
      }
      const __mmask16 take = take16<kSpecial>(v, best);
      best = _mm512_mask_mov_ps(best, take, v);
      at = _mm512_mask_mov_epi32(at, take, _mm512_loadu_si512(s.cols.data() + kj * s.owp + ox0));
    }
    _mm512_storeu_ps(rm + ox0, best);
    _mm512_storeu_si512(ra + ox0, _mm512_add_epi32(at, vbase));
  }
}

// Column pass on 16 output columns at a time; the last block stores only ow's
// tail. It starts from the first window row's result, which is where a scan from
// -inf at the window's first position stands after that row.
template <bool kSpecial>
void column_pass_avx512(const Scratch& s, const PoolWindow& p, int64_t rows, float* dst,
                        int64_t* idx) {
  for (int64_t ox0 = 0; ox0 < p.ow; ox0 += kLanes) {
    __m512 best = _mm512_loadu_ps(s.window_max[0] + ox0);
    __m512i at = _mm512_loadu_si512(s.window_at[0] + ox0);
    for (int64_t r = 1; r < rows; ++r) {
      const __m512 v = _mm512_loadu_ps(s.window_max[r] + ox0);
      const __mmask16 take = take16<kSpecial>(v, best);
      best = _mm512_mask_mov_ps(best, take, v);
      at = _mm512_mask_mov_epi32(at, take, _mm512_loadu_si512(s.window_at[r] + ox0));
    }
    const int64_t rest = p.ow - ox0;
    const auto keep = static_cast<__mmask16>(rest >= kLanes ? 0xFFFF : (1u << rest) - 1);
    _mm512_mask_storeu_ps(dst + ox0, keep, best);
    // Widened to int64 in halves of 8 (the maskz_ forms: GCC 12 flags the plain
    // ones with a false -Wmaybe-uninitialized).
    const __m256i lo = _mm512_maskz_extracti64x4_epi64(0xF, at, 0);
    const __m256i hi = _mm512_maskz_extracti64x4_epi64(0xF, at, 1);
    _mm512_mask_storeu_epi64(idx + ox0, static_cast<__mmask8>(keep & 0xFF),
                             _mm512_maskz_cvtepi32_epi64(0xFF, lo));
    _mm512_mask_storeu_epi64(idx + ox0 + 8, static_cast<__mmask8>(keep >> 8),
                             _mm512_maskz_cvtepi32_epi64(0xFF, hi));
  }
}

// Row pass dispatch on the stride and on whether the row holds NaN or inf.
void row_pass_avx512(const float* line, const PoolWindow& p, const Scratch& s, int32_t base,
                     bool special, float* rm, int32_t* ra) {
  if (p.sw == 2) {
    special ? row_pass_avx512<2, true>(line, p, s, base, rm, ra)
            : row_pass_avx512<2, false>(line, p, s, base, rm, ra);
  } else {
    special ? row_pass_avx512<1, true>(line, p, s, base, rm, ra)
            : row_pass_avx512<1, false>(line, p, s, base, rm, ra);
  }
}
#endif

// Copies n bytes to dst, the 64-byte lines wholly inside it with streaming stores.
void stream_copy(void* dst, const void* src, int64_t n) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
#if defined(__AVX512F__)
  const int64_t head = std::min<int64_t>(n, (64 - reinterpret_cast<uintptr_t>(d) % 64) % 64);
  std::memcpy(d, s, static_cast<size_t>(head));
  int64_t j = head;
  for (; j + 64 <= n; j += 64) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + j), _mm512_loadu_si512(s + j));
  }
  std::memcpy(d + j, s + j, static_cast<size_t>(n - j));
#else
  std::memcpy(d, s, static_cast<size_t>(n));
#endif
}

}  // namespace

bool separable_max_pool_applies(const PoolWindow& p) {
  // Plane columns and flat positions, and the padded line, must fit int32; and
  // every window must hold an element (true once h, w >= 1, since the padding is
  // at most half the kernel; the passes assume it).
  return p.h >= 1 && p.w >= 1 && p.h * p.w < (int64_t{1} << 31) &&
         p.w + 2 * p.pw + 2 * p.kw < (int64_t{1} << 30);
}

void separable_max_pool_planes(const float* x, const PoolWindow& p, float* y, int64_t* idx,
                               int64_t plane_lo, int64_t plane_hi,
                               const SeparableMaxPoolOptions& options) {
  Scratch s(p);
  const bool avx = options.use_avx512 && kHaveAvx512MaxPool;
  const bool avx_rows = avx && (p.sw == 1 || p.sw == 2);
  const bool stream_values = options.stream_values && kHaveStreamingStores;
  const bool stream_indices = options.stream_indices && kHaveStreamingStores;
  const int64_t ohw = p.oh * p.ow;
  // With streaming, a plane's outputs are made here, then streamed out.
  std::vector<float> plane_values(stream_values ? static_cast<size_t>(ohw) : 0);
  std::vector<int64_t> plane_indices(stream_indices ? static_cast<size_t>(ohw) : 0);
  for (int64_t plane = plane_lo; plane < plane_hi; ++plane) {
    const float* src = x + plane * p.h * p.w;
    s.line_row[0] = s.line_row[1] = -1;
    // Row iy's line, copied now unless it already was.
    auto stage_line = [&](int64_t iy) {
      float* line = s.lines.data() + (iy & 1) * s.line_len;
      if (s.line_row[iy & 1] != iy) {
        prefetch_row(src, (iy + kPrefetchRows) * p.w, p.w);
        s.line_special[iy & 1] = load_line(src + iy * p.w, p, line);
        s.line_row[iy & 1] = iy;
      }
      return line;
    };
    float* dst = stream_values ? plane_values.data() : y + plane * ohw;
    int64_t* dst_idx = stream_indices ? plane_indices.data() : idx + plane * ohw;
    std::fill(s.ring_row.begin(), s.ring_row.end(), -1);
    for (int64_t oy = 0; oy < p.oh; ++oy) {
      const int64_t y0 = std::max<int64_t>(oy * p.sh - p.ph, 0);
      const int64_t y1 = std::min<int64_t>(oy * p.sh - p.ph + p.kh, p.h);
      bool special = false;                   // a window row holds NaN or inf
      for (int64_t iy = y0; iy < y1; ++iy) {  // row pass for rows not yet in the ring
        const int64_t slot = iy % p.kh;
        float* rm = s.ring_max.data() + slot * s.owp;
        int32_t* ra = s.ring_at.data() + slot * s.owp;
        s.window_max[iy - y0] = rm;
        s.window_at[iy - y0] = ra;
        if (s.ring_row[slot] != iy) {
          s.ring_row[slot] = iy;
          const float* line = stage_line(iy);
          s.ring_special[slot] = s.line_special[iy & 1] ? 1 : 0;
          // Copy the next row now, so that its stores are done when it is scanned
          // (the scan's loads straddle them; see Note [Separable max-pool]).
          if (iy + 1 < p.h) stage_line(iy + 1);
          const auto base = static_cast<int32_t>(iy * p.w);
#if defined(__AVX512F__)
          if (avx_rows) {
            row_pass_avx512(line, p, s, base, s.ring_special[slot] != 0, rm, ra);
          } else {
            row_pass_portable(line, p, s, base, rm, ra);
          }
#else
          row_pass_portable(line, p, s, base, rm, ra);
#endif
        }
        special = special || s.ring_special[slot] != 0;
      }
      float* out = dst + oy * p.ow;
      int64_t* out_idx = dst_idx + oy * p.ow;
#if defined(__AVX512F__)
      if (avx) {
        special ? column_pass_avx512<true>(s, p, y1 - y0, out, out_idx)
                : column_pass_avx512<false>(s, p, y1 - y0, out, out_idx);
        continue;
      }
#endif
      column_pass_portable(s, p, y1 - y0, static_cast<int32_t>(y0 * p.w), out, out_idx);
    }
    if (stream_values) stream_copy(y + plane * ohw, dst, ohw * int64_t{sizeof(float)});
    if (stream_indices) stream_copy(idx + plane * ohw, dst_idx, ohw * int64_t{sizeof(int64_t)});
  }
  if (stream_values || stream_indices) stream_fence();
  (void)avx_rows;
}

void max_pool_scatter_planes(const float* gy, const int64_t* idx, float* gx, int64_t hw,
                             int64_t ohw, int64_t plane_lo, int64_t plane_hi, bool streaming) {
  // dst[idx[i]] += gy[i] for outputs [i0, i1), asking for the indices and
  // gradients kScatterPrefetch elements ahead as it goes (measured 3.6 -> 2.95
  // ms on the stem pool's backward, 1 thread: the hardware prefetcher alone
  // left the loop waiting on memory).
  auto scatter = [&](float* dst, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i += 16) {
      prefetch_bytes(idx, (i + kScatterPrefetch) * int64_t{sizeof(int64_t)});
      prefetch_bytes(idx, (i + kScatterPrefetch + 8) * int64_t{sizeof(int64_t)});
      prefetch_bytes(gy, (i + kScatterPrefetch) * int64_t{sizeof(float)});
      const int64_t end = std::min(i + 16, i1);
      for (int64_t k = i; k < end; ++k) dst[idx[k]] += gy[k];
    }
  };
#if defined(__AVX512F__)
  if (streaming) {
    // Sum each plane in a cached buffer, then write it out without reading gx's
    // lines first (Note [Streaming stores]); same additions in the same order.
    // Writing it out also zeroes the buffer for the next plane (one pass fewer
    // than a separate fill).
    std::vector<float> buf(static_cast<size_t>(hw), 0.0f);
    float* b = buf.data();
    for (int64_t plane = plane_lo; plane < plane_hi; ++plane) {
      scatter(b, plane * ohw, (plane + 1) * ohw);
      stream_run(
          gx + plane * hw, hw, [&](int64_t j) { return std::exchange(b[j], 0.0f); },
          [&](int64_t j) {
            const __m512 sums = _mm512_loadu_ps(b + j);
            _mm512_storeu_ps(b + j, _mm512_setzero_ps());
            return sums;
          });
    }
    stream_fence();
    return;
  }
#endif
  (void)streaming;
  for (int64_t plane = plane_lo; plane < plane_hi; ++plane) {
    float* dst = gx + plane * hw;
    std::fill(dst, dst + hw, 0.0f);
    scatter(dst, plane * ohw, (plane + 1) * ohw);
  }
}

}  // namespace lockstep::native::detail
