// core/native/fast/gemm_bf16_avx2.cpp — bf16 x bf16 -> float32 GEMM in AVX2 registers,
// the operands widened while they are packed.
//
// § Note [bf16 GEMM in AVX2 registers]
// Where oneDNN has no bf16 kernels (Note [bf16 without oneDNN kernels]) the
// simple float32 path widens all of A and B into float32 copies, runs sgemm and
// rounds C in a third pass. sgemm then packs the copies again into its own
// blocks, so each operand crosses memory three or four times; for the shapes
// with a short side (a ResNet 1x1 layer: 25088 x 64 x 256; attention's 96
// products of 128 x 64 x 128) that is a quarter to a third of the time. Here the
// packing *is* the widening, in the classic blocked order (Goto and van de
// Geijn's; BLIS's loops):
//
//   for each block of kNc columns of C:
//     for each block of kc of the K dimension:
//       pack B (kc x kNc) into float32 slivers of 16 columns   (once, shared)
//       for each block of kMc rows (the threads split these):
//         pack A (kMc x kc) into float32 slivers of 6 rows     (per thread, stays in L2)
//         for each B sliver, for each A sliver: the 6 x 16 micro-tile
//
// The micro-tile keeps its 6 x 16 sums in 12 of AVX2's 16 registers; each step
// of K loads 16 floats of B, broadcasts 6 of A and runs 12 FMAs. A B sliver
// (kc x 16 floats, 16 KiB) stays in L1 while every A sliver of the block passes
// it. Packing widens bf16 exactly (its 16 bits shifted up); A's rows are
// transposed 8 x 8 in registers on the way (a sliver's rows padded to 8 with
// zeros; the 8-float stores overlap, each writing 2 floats the next one
// overwrites). Edges are packed as zeros, so the micro-tile always runs whole
// and its epilogue stores only the live part, under masks.
//
// The epilogue: the first K block applies beta (C = beta C + sums, C not read
// when beta is 0), later blocks add to C, the last adds the bias. A bf16 C is
// written once, rounded: K up to kKcWhole is one block; beyond it the sums go to
// a float32 scratch first and one pass rounds them, so every value is rounded
// once, as gemm_bf16's contract says. With several K blocks C is done a chunk of
// kChunkBytes of float32 sums at a time (B packed again for each chunk), so the
// sums each block adds to stay in the last-level cache instead of crossing
// memory once per block (BERT's decoder: 94 MB of them). Values equal
// gemm_bf16_reference's up to the order of the float32 sums
// (tests/core/test_gemm_bf16_avx2.cpp).
//
// Read before: core/native/fast/gemm_bf16_avx2.h, core/native/fast/bf16_lanes.h.
// Read next: core/native/gemm_bf16_batched.cpp.
#include "core/native/fast/gemm_bf16_avx2.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/env_flag.h"
#include "core/factory.h"
#include "core/native/fast/bf16_lanes.h"
#include "core/native/fast/transpose_tiles.h"
#include "core/parallel.h"

namespace lockstep::native::detail {

#if LOCKSTEP_BF16_LANES_AVX2

namespace {

namespace L = lanes_avx2;

constexpr int64_t kMr = 6;         // rows of a micro-tile (A sliver height)
constexpr int64_t kNr = 16;        // columns of a micro-tile (B sliver width)
constexpr int64_t kMc = 96;        // rows of A packed at a time: 16 slivers
constexpr int64_t kKc = 256;       // K block: a B sliver of 16 KiB
constexpr int64_t kKcWhole = 384;  // K up to this is one block (no second pass over C)
constexpr int64_t kNc = 1024;      // columns of B packed at a time
constexpr int64_t kChunkBytes = int64_t{4} << 20;  // C's float32 sums kept in cache across K blocks

struct Operands {
  int64_t m;  // op(A)'s rows: a stored (k, m) A has no readable values past them in its last row
  bool trans_a, trans_b;
  const BFloat16* a;
  int64_t lda;
  const BFloat16* b;
  int64_t ldb;
};

inline __m256 widen8(const BFloat16* p) { return L::load(p, L::kAll); }  // exactly

// op(A)'s rows [i0, i0 + rows) x columns [p0, p0 + kc) into one sliver:
// d[p * 6 + r] = op(A)(i0 + r, p0 + p), rows past `rows` zero. d has 2 floats
// of slack after its kc * 6 (the overlapping stores).
void pack_a_sliver(const Operands& o, int64_t i0, int64_t rows, int64_t p0, int64_t kc, float* d) {
  int64_t p = 0;
  if (!o.trans_a && rows == kMr) {  // A (m, k): 6 rows of kc, transposed 8 steps of K at a time
    const BFloat16* src = o.a + i0 * o.lda + p0;
    for (; p + 8 <= kc; p += 8) {
      __m256 r[8];
      for (int64_t i = 0; i < kMr; ++i) r[i] = widen8(src + i * o.lda + p);
      r[6] = r[7] = _mm256_setzero_ps();
      transpose_8x8(r);
      for (int64_t q = 0; q < 8; ++q) _mm256_storeu_ps(d + (p + q) * kMr, r[q]);
    }
  } else if (o.trans_a && rows == kMr && i0 + 8 <= o.m) {  // A stored (k, m): 8 read, 6 kept
    for (; p < kc; ++p) _mm256_storeu_ps(d + p * kMr, widen8(o.a + (p0 + p) * o.lda + i0));
  }
  for (; p < kc; ++p) {  // the rest, and slivers cut by the last row
    for (int64_t r = 0; r < kMr; ++r) {
      const BFloat16* x = o.trans_a ? o.a + (p0 + p) * o.lda + i0 + r : o.a + (i0 + r) * o.lda + p0 + p;
      d[p * kMr + r] = r < rows ? static_cast<float>(*x) : 0.0f;
    }
  }
}

// op(B)'s rows [p0, p0 + kc) x columns [j0, j0 + cols) into one sliver:
// d[p * 16 + j] = op(B)(p0 + p, j0 + j), columns past `cols` zero.
void pack_b_sliver(const Operands& o, int64_t p0, int64_t kc, int64_t j0, int64_t cols, float* d) {
  if (!o.trans_b && cols == kNr) {  // B (k, n): 16 consecutive values a row
    for (int64_t p = 0; p < kc; ++p) {
      const BFloat16* src = o.b + (p0 + p) * o.ldb + j0;
      _mm256_storeu_ps(d + p * kNr, widen8(src));
      _mm256_storeu_ps(d + p * kNr + 8, widen8(src + 8));
    }
    return;
  }
  // B stored (n, k): 16 rows of kc, transposed (and widened) in 8 x 8 tiles.
  if (o.trans_b && cols == kNr && transpose_widen_bf16(o.b + j0 * o.ldb + p0, o.ldb, d, kNr, kc, kNr)) return;
  for (int64_t p = 0; p < kc; ++p) {
    for (int64_t j = 0; j < kNr; ++j) {
      const BFloat16* x = o.trans_b ? o.b + (j0 + j) * o.ldb + p0 + p : o.b + (p0 + p) * o.ldb + j0 + j;
      d[p * kNr + j] = j < cols ? static_cast<float>(*x) : 0.0f;
    }
  }
}

// Where a finished micro-tile goes: its top-left in C and live part, and what
// the epilogue adds (the Note's first / later / last K block).
template <class Out>
struct Tile {
  Out* c;
  int64_t ldc, rows, cols;
  bool first;          // the first K block: beta applies
  float beta;
  const float* bias;   // the tile's 16 widened bias values on the last K block, else null
};

template <class Out>
inline void finish_row(const Tile<Out>& t, int64_t r, __m256 lo, __m256 hi) {
  Out* row = t.c + r * t.ldc;
  const L::K k_lo = L::first(t.cols), k_hi = t.cols > 8 ? L::first(t.cols - 8) : 0;
  if (t.bias != nullptr) {
    lo = L::add(lo, _mm256_loadu_ps(t.bias));
    hi = L::add(hi, _mm256_loadu_ps(t.bias + 8));
  }
  if (!t.first || t.beta != 0.0f) {  // C read: accumulate (later blocks) or beta C (the first)
    const __m256 beta = _mm256_set1_ps(t.first ? t.beta : 1.0f);
    lo = L::fma(beta, L::load(row, k_lo), lo);
    if (t.cols > 8) hi = L::fma(beta, L::load(row + 8, k_hi), hi);
  }
  if constexpr (std::is_same_v<Out, BFloat16>) {
    if (t.cols == kNr) {  // 16 rounded values in one store
      const __m256i r = _mm256_packus_epi32(L::detail::round_lanes(_mm256_castps_si256(lo)),
                                            L::detail::round_lanes(_mm256_castps_si256(hi)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(row), _mm256_permute4x64_epi64(r, 0xD8));
      return;
    }
  }
  L::store(row, k_lo, lo);
  if (t.cols > 8) L::store(row + 8, k_hi, hi);
}

// The 6 x 16 micro-tile: sums over p < kc of a[p * 6 + r] * b[p * 16 + j].
template <class Out>
void micro_tile(int64_t kc, const float* a, const float* b, const Tile<Out>& t) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t r = 0; r < t.rows; ++r) {  // C's rows on their way while the sums run
    _mm_prefetch(reinterpret_cast<const char*>(t.c + r * t.ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(t.c + r * t.ldc + t.cols - 1), _MM_HINT_T0);
  }
  for (int64_t p = 0; p < kc; ++p, a += kMr, b += kNr) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    // Row r of the tile: A's value broadcast, times B's 16.
    const auto row = [&](int r, __m256& lo, __m256& hi) {
      const __m256 x = _mm256_broadcast_ss(a + r);
      lo = _mm256_fmadd_ps(x, b0, lo);
      hi = _mm256_fmadd_ps(x, b1, hi);
    };
    row(0, c00, c01), row(1, c10, c11), row(2, c20, c21);
    row(3, c30, c31), row(4, c40, c41), row(5, c50, c51);
  }
  // Row by row from the registers (an array of them would go through the stack).
  finish_row(t, 0, c00, c01);
  if (t.rows > 1) finish_row(t, 1, c10, c11);
  if (t.rows > 2) finish_row(t, 2, c20, c21);
  if (t.rows > 3) finish_row(t, 3, c30, c31);
  if (t.rows > 4) finish_row(t, 4, c40, c41);
  if (t.rows > 5) finish_row(t, 5, c50, c51);
}

template <class Out>
void blocked_gemm(const Operands& o, int64_t m, int64_t n, int64_t k, float beta, Out* c,
                  int64_t ldc, const float* bias) {
  const int64_t kc_step = k <= kKcWhole ? k : kKc;
  thread_local std::vector<float> b_pack;
  b_pack.resize(static_cast<size_t>(kc_step * (kNc + kNr)));
  for (int64_t j0 = 0; j0 < n; j0 += kNc) {
    const int64_t nc = std::min(kNc, n - j0), b_slivers = (nc + kNr - 1) / kNr;
    for (int64_t p0 = 0; p0 < k; p0 += kc_step) {
      const int64_t kc = std::min(kc_step, k - p0);
      float* bp = b_pack.data();
      parallel_for(0, b_slivers, 8, [&](int64_t lo, int64_t hi) {
        for (int64_t s = lo; s < hi; ++s) {
          pack_b_sliver(o, p0, kc, j0 + s * kNr, std::min(kNr, nc - s * kNr), bp + s * kc * kNr);
        }
      });
      const bool first = p0 == 0, last = p0 + kc == k;
      parallel_for(0, (m + kMc - 1) / kMc, 1, [&](int64_t lo, int64_t hi) {
        thread_local std::vector<float> a_pack;
        a_pack.resize(static_cast<size_t>(kMc * kKcWhole + 8));
        for (int64_t blk = lo; blk < hi; ++blk) {
          const int64_t i0 = blk * kMc, mc = std::min(kMc, m - i0), a_slivers = (mc + kMr - 1) / kMr;
          for (int64_t s = 0; s < a_slivers; ++s) {
            pack_a_sliver(o, i0 + s * kMr, std::min(kMr, mc - s * kMr), p0, kc,
                          a_pack.data() + s * kc * kMr);
          }
          for (int64_t sb = 0; sb < b_slivers; ++sb) {
            const int64_t j = j0 + sb * kNr;
            for (int64_t sa = 0; sa < a_slivers; ++sa) {
              const int64_t i = i0 + sa * kMr;
              const Tile<Out> t{c + i * ldc + j, ldc, std::min(kMr, m - i), std::min(kNr, n - j),
                                first, beta, last && bias != nullptr ? bias + j : nullptr};
              micro_tile(kc, a_pack.data() + sa * kc * kMr, bp + sb * kc * kNr, t);
            }
          }
        }
      });
    }
  }
}

// C (rows, cols) = sums + beta C, rounded to bf16 (C not read when beta is 0).
void round_sums(const float* sums, int64_t rows, int64_t cols, float beta, BFloat16* c, int64_t ldc) {
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / cols), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      for (int64_t j = 0; j < cols; j += 8) {
        const L::K live = L::first(cols - j);
        __m256 v = L::load(sums + i * cols + j, live);
        if (beta != 0.0f) v = L::fma(_mm256_set1_ps(beta), L::load(c + i * ldc + j, live), v);
        L::store(c + i * ldc + j, live, v);
      }
    }
  });
}

}  // namespace

bool gemm_bf16_avx2_available() { return true; }

template <class Out>
bool gemm_bf16_avx2(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta,
                    Out* c, int64_t ldc, const BFloat16* bias) {
  static const bool on = env_flag("LOCKSTEP_BF16_AVX2_GEMM", true);
  if (!on) return false;
  if (m == 0 || n == 0) return true;
  const Operands o{m, trans_a, trans_b, a, lda, b, ldb};
  std::vector<float> bias32;  // n + 16: a tile's bias load may run past n
  if (bias != nullptr) {
    bias32.assign(static_cast<size_t>(n + kNr), 0.0f);
    widen_bf16(bias, bias32.data(), n);
  }
  const float* bias_f = bias != nullptr ? bias32.data() : nullptr;
  if (k <= kKcWhole) {  // one K block: C written once, straight from the registers
    blocked_gemm(o, m, n, k, beta, c, ldc, bias_f);
    return true;
  }
  // Several K blocks: C a chunk at a time, so that the float32 sums each block adds
  // to stay in the last-level cache; a bf16 C's sums in a float32 scratch first,
  // then one rounding pass.
  const int64_t cols = std::min(n, kNc);
  const int64_t rows = std::max(kMc, kChunkBytes / (4 * cols) / kMc * kMc);
  Tensor scratch = std::is_same_v<Out, float> ? Tensor() : empty({rows, cols}, kFloat32);
  for (int64_t i0 = 0; i0 < m; i0 += rows) {
    for (int64_t j0 = 0; j0 < n; j0 += cols) {
      const int64_t mi = std::min(rows, m - i0), nj = std::min(cols, n - j0);
      const Operands sub{mi, trans_a, trans_b, trans_a ? a + i0 : a + i0 * lda, lda,
                         trans_b ? b + j0 * ldb : b + j0, ldb};
      const float* bias_j = bias_f != nullptr ? bias_f + j0 : nullptr;
      Out* cij = c + i0 * ldc + j0;
      if constexpr (std::is_same_v<Out, float>) {
        blocked_gemm(sub, mi, nj, k, beta, cij, ldc, bias_j);
      } else {
        float* sums = scratch.data_ptr<float>();  // (mi, nj), leading dimension nj
        blocked_gemm<float>(sub, mi, nj, k, 0.0f, sums, nj, bias_j);
        round_sums(sums, mi, nj, beta, cij, ldc);
      }
    }
  }
  return true;
}

#else  // no AVX2 + FMA in this build: the caller's float32 path

bool gemm_bf16_avx2_available() { return false; }

template <class Out>
bool gemm_bf16_avx2(bool, bool, int64_t, int64_t, int64_t, const BFloat16*, int64_t,
                    const BFloat16*, int64_t, float, Out*, int64_t, const BFloat16*) {
  return false;
}

#endif

template bool gemm_bf16_avx2<float>(bool, bool, int64_t, int64_t, int64_t, const BFloat16*,
                                    int64_t, const BFloat16*, int64_t, float, float*, int64_t,
                                    const BFloat16*);
template bool gemm_bf16_avx2<BFloat16>(bool, bool, int64_t, int64_t, int64_t, const BFloat16*,
                                       int64_t, const BFloat16*, int64_t, float, BFloat16*,
                                       int64_t, const BFloat16*);

}  // namespace lockstep::native::detail
