// core/native/fast/batch_norm_relu_pool_bf16_nhwc.cpp — max_pool2d(relu(batch_norm(x))) on
// channels-last bfloat16 activations, without the batch norm's output.
//
// § Note [Stem batch norm, ReLU and max-pool in one pass]
// A ResNet's stem ends in bn1, relu and a 3x3 stride-2 max-pool. As two ops,
// batch_norm_relu writes y = relu(bn(x)) (N, C, H, W), the largest activation of the
// network (112 x 112 x 64 a ResNet50 image), and max_pool2d reads it back and writes
// int64 indices; backward, max_pool2d's backward writes y's gradient, which batch
// norm's backward reads twice. Here y never leaves the cache, and its gradient is written
// once, into dx's buffer:
//   forward   the statistics pass over x (batch_statistics, the one-input kernels'),
//             then per output row the y rows its windows cover, computed into a
//             per-thread buffer with the very row loop batch_norm_relu runs
//             (forward_rows<Relu>), pooled by max_pool2d's rule (take v when v > best
//             or v is NaN, the window's first element to start; eight channels in AVX2
//             registers across the window; the maximum is one of y's values, so exact),
//             and each output's window offset (iy - wy0) kW + (ix - wx0) kept in one
//             byte instead of an int64 index;
//   backward  y's gradient, one image row at a time: each output row scattered once to
//             the pixels its offsets name (eight channels a step in AVX2, a blend per
//             window element), in output order, into float32 sums over the kH image rows
//             it can reach, and a row rounded once — the sum max_pool2d's backward
//             forms — when no output row left reaches it; batch norm's row loops
//             run on each such row as it comes (grad_sums_rows into the partial sums of
//             its statistics block), and the row is kept in dx's buffer, which the second
//             pass (grad_input_rows) then overwrites with dx in place; the ReLU's mask
//             recomputed from x (Mask::Input: batch_norm_relu_backward_from_input's).
//             Scattering a second time instead of keeping y's gradient cost more time
//             than that pass over memory (docs/results/bf16.md).
// The statistics blocks are the one-input kernels' (fixed by N H W alone), and every
// value is the reference's expression in the reference's order, so the outputs, the
// statistics and all three gradients equal the two ops' bit for bit
// (tests/core/test_batch_norm_relu_pool.cpp).
//
// Read before: core/native/batch_norm_relu_pool.h, core/native/fast/batch_norm_bf16_nhwc_rows.h,
// core/native/fast/pool_max_channels_last.cpp (the pooling rule).
// Read next: autograd/functions/batch_norm_relu_pool.cpp.
#include <algorithm>
#include <vector>

#include "core/native/batch_norm_relu_pool.h"
#include "core/native/bf16_rows.h"
#include "core/native/fast/batch_norm_bf16_nhwc_rows.h"
#include "core/native/memory_format.h"
#include "core/parallel.h"
#include "core/profiler.h"

namespace lockstep::native::detail {

using namespace nhwc_bn;  // the row loops: fast/batch_norm_bf16_nhwc_rows.h

namespace {

// One output pixel from the y rows [y0, y1) of its window, widened in `rows` (row y0 first, W
// pixels of C values a row), columns [x0, x1); wy0, wx0: the window's top-left corner (padding
// included). Writes the C maxima into best and their window offsets into offset. The maximum
// is a widened bf16 value, so rounding it again gives its bits back (a NaN is quiet already).
void pool_pixel(const float* rows, int64_t w, int64_t c, int64_t y0, int64_t y1, int64_t x0,
                int64_t x1, int64_t wy0, int64_t wx0, int64_t kw, float* best, uint8_t* offset) {
  const auto first = static_cast<int32_t>((y0 - wy0) * kw + (x0 - wx0));
  int64_t ch = 0;
#if LOCKSTEP_BF16_LANES_AVX2
  // Eight channels in registers across the window (no stores until its end).
  for (; ch + 8 <= c; ch += 8) {
    __m256 b = _mm256_loadu_ps(rows + x0 * c + ch);  // the window's first element starts it
    __m256i at = _mm256_set1_epi32(first);
    for (int64_t iy = y0; iy < y1; ++iy) {
      for (int64_t ix = iy == y0 ? x0 + 1 : x0; ix < x1; ++ix) {
        const __m256 v = _mm256_loadu_ps(rows + ((iy - y0) * w + ix) * c + ch);
        const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, b, _CMP_GT_OQ),
                                         _mm256_cmp_ps(v, v, _CMP_UNORD_Q));  // NaN propagates
        b = _mm256_blendv_ps(b, v, take);
        const __m256i here = _mm256_set1_epi32(static_cast<int32_t>((iy - wy0) * kw + (ix - wx0)));
        at = _mm256_blendv_epi8(at, here, _mm256_castps_si256(take));
      }
    }
    _mm256_storeu_ps(best + ch, b);
    alignas(32) int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), at);
    for (int l = 0; l < 8; ++l) offset[ch + l] = static_cast<uint8_t>(lanes[l]);
  }
#endif
  for (; ch < c; ++ch) {  // the same rule, one channel at a time
    float b = rows[x0 * c + ch];
    int32_t at = first;
    for (int64_t iy = y0; iy < y1; ++iy) {
      for (int64_t ix = iy == y0 ? x0 + 1 : x0; ix < x1; ++ix) {
        const float v = rows[((iy - y0) * w + ix) * c + ch];
        if (v > b || v != v) {
          b = v;
          at = static_cast<int32_t>((iy - wy0) * kw + (ix - wx0));
        }
      }
    }
    best[ch] = b;
    offset[ch] = static_cast<uint8_t>(at);
  }
}

// The floats between two rows of row_gradients' ring: a row's W C, and 16 more, so that the
// same column of two rows does not lie a multiple of 4 KiB apart (W C floats is 7 x 4 KiB at
// ResNet's stem), where the CPU would take a load from one row for the store just made to
// the other and wait for it (4K aliasing).
inline int64_t ring_slot(int64_t w, int64_t c) { return w * c + 16; }

// y's gradient at the input pixels [r0, r1) (rows of the (N H W, C) input), one image row
// after the other: emit(g, first, count) gets each row's pixels in the range, g (count, C)
// their values and `first` the first one's row. Each value is the sum, in output order, of
// grad_output over the outputs whose offset names the pixel, rounded once — max_pool2d's
// backward — formed in `ring`: kH image rows of W C floats, ring_slot floats apart, row ty
// in slot ty mod kH, and a slot more that takes the shares of the rows above r0's first
// (so that the loop has no branch: the offsets are data). Every output row is scattered once, when
// the first image row it reaches is next, and an image row is handed on once no output row left
// reaches it. `row`: W C bf16 of scratch; `g`: C floats.
template <class Emit>
void row_gradients(const BFloat16* gy, const uint8_t* offsets, const rules::PoolWindow& p,
                   int64_t c, int64_t r0, int64_t r1, float* ring, BFloat16* row, float* g,
                   Emit&& emit) {
  const int64_t plane = p.h * p.w, wc = p.w * c, window = p.kh * p.kw;
  const int64_t slot = ring_slot(p.w, c);
  int64_t at[256];  // window offset k -> its element's place in `ring`, less the window's column
  for (int64_t img = r0 / plane; img * plane < r1; ++img) {
    const int64_t base = img * plane;
    const int64_t iy0 = std::max<int64_t>(r0 - base, 0) / p.w;
    const int64_t iy1 = (std::min<int64_t>(r1 - base, plane) - 1) / p.w;  // inclusive
    std::fill(ring, ring + (p.kh + 1) * slot, 0.0f);
    // The first output row whose windows reach row iy0.
    int64_t oy = std::max<int64_t>(0, (iy0 + p.ph - p.kh + p.sh) / p.sh);
    for (int64_t iy = iy0; iy <= iy1; ++iy) {
      for (; oy <= std::min<int64_t>(p.oh - 1, (iy + p.ph) / p.sh); ++oy) {  // reaching iy
        for (int64_t k = 0; k < window; ++k) {
          const int64_t ty = oy * p.sh - p.ph + k / p.kw;
          at[k] = (ty >= iy0 ? ty % p.kh : p.kh) * slot + (k % p.kw - p.pw) * c;
        }
        // The window's rows and columns inside the image: [ky0, ky1) x [kx0(ox), kx1(ox)).
        const int64_t ky0 = std::max<int64_t>(0, p.ph - oy * p.sh);
        const int64_t ky1 = std::min<int64_t>(p.kh, p.h + p.ph - oy * p.sh);
        for (int64_t ox = 0; ox < p.ow; ++ox) {
          const int64_t o = ((img * p.oh + oy) * p.ow + ox) * c;
          widen_bf16(gy + o, g, c);
          const uint8_t* off = offsets + o;
          const int64_t column = ox * p.sw * c;  // plus at[k]: the window's element k
          int64_t ch = 0;
#if LOCKSTEP_BF16_LANES_AVX2
          // Eight channels a step: for each element k of the window, add g where the
          // offset is k (a blend, so the other lanes keep their bits).
          const int64_t kx0 = std::max<int64_t>(0, p.pw - ox * p.sw);
          const int64_t kx1 = std::min<int64_t>(p.kw, p.w + p.pw - ox * p.sw);
          for (; ch + 8 <= c; ch += 8) {
            const __m256i mine =
                _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(off + ch)));
            const __m256 add = _mm256_loadu_ps(g + ch);
            for (int64_t ky = ky0; ky < ky1; ++ky) {
              for (int64_t kx = kx0; kx < kx1; ++kx) {
                const int64_t k = ky * p.kw + kx;
                const __m256 take = _mm256_castsi256_ps(
                    _mm256_cmpeq_epi32(mine, _mm256_set1_epi32(static_cast<int32_t>(k))));
                float* dst = ring + (at[k] + column + ch);
                const __m256 sum = _mm256_loadu_ps(dst);
                _mm256_storeu_ps(dst, _mm256_blendv_ps(sum, _mm256_add_ps(sum, add), take));
              }
            }
          }
#endif
          for (; ch < c; ++ch) ring[at[off[ch]] + column + ch] += g[ch];
        }
      }
      float* acc = ring + iy % p.kh * slot;  // row iy, complete
      round_to_bf16(acc, row, wc);
      std::fill(acc, acc + wc, 0.0f);  // for row iy + kH
      const int64_t first = std::max(base + iy * p.w, r0);
      const int64_t last = std::min(base + (iy + 1) * p.w, r1);
      emit(row + (first - base - iy * p.w) * c, first, last - first);
    }
  }
}

}  // namespace

BatchNormReluPoolForward batch_norm_relu_pool_bf16_nhwc_forward(const Tensor& input,
                                                                const BatchNormTensors& bn,
                                                                bool training, double momentum,
                                                                double eps,
                                                                const rules::PoolWindow& p) {
  check_nhwc_input(input, "batch_norm_relu_max_pool2d");
  const int64_t n = input.size(0), c = input.size(1), rows = n * p.h * p.w;
  const Tensor w = bn.weight.defined() ? contiguous(bn.weight) : Tensor();
  const Tensor b = bn.bias.defined() ? contiguous(bn.bias) : Tensor();
  BatchNormReluPoolForward f;
  f.output = empty_channels_last({n, c, p.oh, p.ow}, kBFloat16);  // (N, C, oH, oW) NHWC
  f.argmax = empty({n * p.oh * p.ow, c}, kUInt8);                 // (N oH oW, C)
  f.save_mean = empty({c}, kFloat32);                             // (C)
  f.save_invstd = empty({c}, kFloat32);                           // (C)
  const BFloat16* xp = input.data_ptr<BFloat16>();                // (R, C)
  float* mean_p = f.save_mean.data_ptr<float>();
  float* invstd_p = f.save_invstd.data_ptr<float>();
  batch_statistics(xp, rows, c, bn.running_mean, bn.running_var, training, momentum, eps, mean_p,
                   invstd_p);
  const size_t cs = static_cast<size_t>(c);
  std::vector<float> scale(cs), shift(cs);  // (C)
  affine_of(mean_p, invstd_p, w.defined() ? w.data_ptr<float>() : nullptr,
            b.defined() ? b.data_ptr<float>() : nullptr, c, scale.data(), shift.data());
  const float* scp = scale.data();
  const float* shp = shift.data();
  BFloat16* yp = f.output.data_ptr<BFloat16>();  // (N oH oW, C)
  uint8_t* op = f.argmax.data_ptr<uint8_t>();
  parallel_for(0, n * p.oh, 1, [&p, xp, yp, op, scp, shp, c](int64_t lo, int64_t hi) {
    const size_t band = static_cast<size_t>(p.kh * p.w * c);
    std::vector<BFloat16> rows(band);  // (kH W, C): the y rows of one row of windows
    std::vector<float> rows_f(band);   // the same, widened
    std::vector<float> best(static_cast<size_t>(p.ow * c));  // (oW, C): one row of maxima
    for (int64_t r = lo; r < hi; ++r) {                      // r = image * oH + oy
      const int64_t img = r / p.oh, oy = r % p.oh, wy0 = oy * p.sh - p.ph;
      const int64_t y0 = std::max<int64_t>(wy0, 0), y1 = std::min<int64_t>(wy0 + p.kh, p.h);
      // y = relu(x * scale + shift) of input rows [y0, y1), as batch_norm_relu stores it
      forward_rows<Form::Relu>(xp + (img * p.h + y0) * p.w * c, nullptr, rows.data(), nullptr, 0,
                               (y1 - y0) * p.w, c, scp, shp);
      widen_bf16(rows.data(), rows_f.data(), (y1 - y0) * p.w * c);
      for (int64_t ox = 0; ox < p.ow; ++ox) {
        const int64_t wx0 = ox * p.sw - p.pw;
        const int64_t x0 = std::max<int64_t>(wx0, 0), x1 = std::min<int64_t>(wx0 + p.kw, p.w);
        pool_pixel(rows_f.data(), p.w, c, y0, y1, x0, x1, wy0, wx0, p.kw, best.data() + ox * c,
                   op + (r * p.ow + ox) * c);
      }
      round_to_bf16(best.data(), yp + r * p.ow * c, p.ow * c);
    }
  });
  return f;
}

std::array<Tensor, 3> batch_norm_relu_pool_bf16_nhwc_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& bias,
    const Tensor& save_mean, const Tensor& save_invstd, const Tensor& offsets,
    const rules::PoolWindow& p, bool training, const std::array<bool, 3>& need) {
  const char* op = "batch_norm_relu_max_pool2d";
  check_nhwc_input(input, op);
  const int64_t n = input.size(0), c = input.size(1), rows = n * p.h * p.w;
  LS_CHECK(offsets.dim() == 2 && offsets.size(0) == n * p.oh * p.ow && offsets.size(1) == c &&
               offsets.is_contiguous(),
           op, ": the window offsets must be the (", n * p.oh * p.ow, ", ", c,
           ") uint8 tensor the forward returned for this input, but got ", offsets.shape_str());
  const Tensor gy = channels_last(grad_output);  // (N, C, oH, oW) NHWC
  const Tensor w = weight.defined() ? contiguous(weight) : Tensor();
  const Tensor b = bias.defined() ? contiguous(bias) : Tensor();
  const Tensor mean_t = contiguous(save_mean), invstd_t = contiguous(save_invstd);
  std::array<Tensor, 3> d;
  if (need[0]) d[0] = empty_channels_last(input.sizes(), kBFloat16);  // (N, C, H, W) NHWC
  if (need[1]) d[1] = empty({c}, kFloat32);                           // (C)
  if (need[2]) d[2] = empty({c}, kFloat32);                           // (C)
  const float* wp = w.defined() ? w.data_ptr<float>() : nullptr;
  const float* mean_p = mean_t.data_ptr<float>();
  const float* invstd_p = invstd_t.data_ptr<float>();
  const size_t cs = static_cast<size_t>(c);
  std::vector<float> scale(cs), shift(cs), a(cs), bx(cs), c0(cs);  // (C)
  affine_of(mean_p, invstd_p, wp, b.defined() ? b.data_ptr<float>() : nullptr, c, scale.data(),
            shift.data());
  const BFloat16* gyp = gy.data_ptr<BFloat16>();  // (N oH oW, C)
  const uint8_t* offp = offsets.data_ptr<uint8_t>();
  // row_gradients' scratch: kH + 1 image rows of float sums, one of bf16
  const size_t ring_size = static_cast<size_t>((p.kh + 1) * ring_slot(p.w, c));
  const size_t row_size = static_cast<size_t>(p.w * c);
  const BFloat16* xp = input.data_ptr<BFloat16>();  // (R, C)
  const int64_t blocks = (rows + kRows - 1) / kRows;
  // As the one-input backward: sums for the parameters' gradients and training's grad_input.
  const bool sums = need[1] || need[2] || (need[0] && training);
  if (!sums && !need[0]) return d;
  std::vector<double> sum_g(cs, 0.0), sum_g_xmu(cs, 0.0);                         // (C)
  std::vector<float> part_g(static_cast<size_t>(sums ? blocks * c : 0), 0.0f);    // (blocks, C)
  std::vector<float> part_xmu(static_cast<size_t>(sums ? blocks * c : 0), 0.0f);  // (blocks, C)
  float* pg = part_g.data();
  float* px = part_xmu.data();
  BFloat16* gxp = need[0] ? d[0].data_ptr<BFloat16>() : nullptr;
  // Pass 1: y's gradient, image row by image row, into the partial sums of each row's
  // statistics block, and kept in dx's buffer for pass 2. One chunk of blocks a thread, so
  // that few output rows are scattered twice; each block's rows still reach its partial
  // sums in order, whatever the chunks.
  parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> ring(ring_size);
    std::vector<BFloat16> row(row_size);
    std::vector<float> widened(cs);
    row_gradients(
        gyp, offp, p, c, lo * kRows, std::min(rows, hi * kRows), ring.data(), row.data(),
        widened.data(), [&](const BFloat16* g, int64_t first, int64_t count) {
          if (gxp != nullptr) {
            std::copy(g, g + count * c, gxp + first * c);
          }
          for (int64_t r = first; sums && r < first + count;) {  // block by block
            const int64_t blk = r / kRows, end = std::min(first + count, (blk + 1) * kRows);
            // The row loops' operands for x's rows [r, end), g their gradient.
            const Operands o{g + (r - first) * c, xp + r * c, nullptr,     scale.data(),
                             shift.data(),        mean_p,     a.data(),    bx.data(),
                             c0.data(),           nullptr,    bit_words(c)};
            grad_sums_rows<Mask::Input>(o, nullptr, 0, end - r, c, pg + blk * c, px + blk * c);
            r = end;
          }
        });
  });
  if (sums) {
    sum_g = combine(part_g, blocks, c);
    sum_g_xmu = combine(part_xmu, blocks, c);
  }
  grad_coefficients(sum_g, sum_g_xmu, wp, mean_p, invstd_p, rows, training,
                    need[1] ? d[1].data_ptr<float>() : nullptr,
                    need[2] ? d[2].data_ptr<float>() : nullptr, a.data(), bx.data(), c0.data());
  if (gxp == nullptr) return d;
  // Pass 2: dx over y's gradient in place, each value read before its dx is written.
  profiler::add_bytes(static_cast<int64_t>(2 * d[0].nbytes()));  // y's gradient written, read back
  const Operands o{gxp,      xp,        nullptr,   scale.data(), shift.data(), mean_p,
                   a.data(), bx.data(), c0.data(), nullptr,      bit_words(c)};
  parallel_for(0, rows, kRows, [&o, gxp, c](int64_t lo, int64_t hi) {
    grad_input_rows<Mask::Input>(o, gxp, lo, hi, c);
  });
  return d;
}

}  // namespace lockstep::native::detail
