// core/native/fast/batch_norm_bf16_nhwc.cpp — bfloat16 batch norm on channels-last activations.
//
// batch_norm_bf16_forward / _backward (core/native/batch_norm_bf16.cpp) hand a 4-d
// channels-last input that is not also contiguous (Note [Channels-last activations]
// in core/native/memory_format.h) to the two kernels here, which keep that order:
// the output and the activation gradients are channels-last too, and no operand is
// reordered to NCHW (one that arrives NCHW is copied to channels-last first).
// Operands, dtypes and formulas are those of Note [bfloat16 batch norm].
//
// § Note [bfloat16 batch norm on channels-last activations]
// An (N, C, H, W) channels-last buffer is an (R, C) row-major matrix, R = N H W:
// row r holds the C channels of one pixel, so a channel's statistics are the sums
// of one column. The loops run along rows and vectorise across C (each row's C
// values are adjacent), never along a strided column:
//   - statistics pass (training forward; backward): the R rows are cut into
//     blocks of kRows rows, fixed by R alone. Each block sums its rows, one row
//     after the other, into its own C-wide float32 partial sums (per column:
//     kRows = 256 sequential float adds, no more than a 16-float SIMD lane makes
//     in the NCHW kernel's 4096-value summation blocks), and parallel_for hands
//     out whole blocks.
//     The partials are then added in double, block 0 first, per column. The
//     order of every addition is fixed by R and C, so the statistics do not
//     depend on the thread count, bit for bit.
//   - elementwise pass (the output; the backward's grad_input): rows split
//     anyhow among threads, each value from per-channel coefficients.
// Each row is walked 16 channels at a time in AVX-512 registers (the last step
// masked; 8 at a time with AVX2 only, one without either, with the same bits:
// Note [Row lanes, same bits] in fast/bf16_lanes.h): bf16 loads
// widen, the arithmetic is float32, and each output is rounded once into bf16
// (as core/native/bf16_rows.h); the C-wide partial sums and per-channel
// coefficients stay in L1 between rows. (A first version widened spans of rows
// into float buffers and ran `omp simd` loops on them, as batch_norm_bf16.cpp
// does: its backward was slower than the NCHW kernel's.) Against the NCHW
// kernel on ResNet50's shapes: docs/results/kernel_choices.md.
// The forward's statistics are shifted one-pass sums (Note [One-pass batch
// statistics] in batch_norm.cpp), the shift K[c] being the first row's value: the
// very value the NCHW kernel shifts channel c by, x[0, c, 0, 0]. The backward sums
// g and g * (x - mean) under the same masks. The per-channel coefficients (scale,
// shift; a, bx, c0) come from affine_coefficients / grad_input_coefficients
// (batch_norm_sums.h) as in the NCHW kernel, and the forward's outputs and both
// masks are the same fmas (Note [ReLU mask from the input]: a channels-last
// forward and an NCHW backward, or the other way round, agree on the mask);
// grad_input is fma(a, gm, fma(bx, x, c0)), which GCC may contract differently
// in the NCHW loop. So the kernels differ in the order of the float sums (and
// that rounding): the statistics agree to a few float ulps, the bf16 outputs to
// one bf16 ulp where such a difference moves a rounding (about 1 value in 10^4),
// and batch_norm_add_relu's residual gradient bit for bit
// (tests/core/test_batch_norm_bf16_nhwc.cpp).
//
// Read before: core/native/batch_norm_bf16.cpp, core/native/batch_norm_sums.h,
// core/native/memory_format.h. Read next: core/native/fast/batch_norm_bf16_nhwc_rows.h (the
// row loops), batch_norm_bf16_nhwc_pair.cpp, autograd/functions/batch_norm.cpp.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/native/batch_norm_bf16.h"
#include "core/native/bf16_rows.h"
#include "core/native/fast/batch_norm_bf16_nhwc_rows.h"
#include "core/native/fast/bf16_lanes.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/parallel.h"

namespace lockstep::native {

using namespace nhwc_bn;  // the row loops: fast/batch_norm_bf16_nhwc_rows.h

namespace nhwc_bn {

void batch_statistics(const BFloat16* x, int64_t rows, int64_t c, const Tensor& running_mean,
                      const Tensor& running_var, bool training, double momentum, double eps,
                      float* mean, float* invstd) {
  const bool update = training && running_mean.defined();
  const bool update_var = training && running_var.defined();
  const size_t cs = static_cast<size_t>(c);
  if (training) {  // rows >= 2 (check_statistics_source)
    const int64_t blocks = (rows + kRows - 1) / kRows;
    std::vector<float> k0(cs);  // (C): row 0, the shifts
    widen_bf16(x, k0.data(), c);
    std::vector<float> part(static_cast<size_t>(blocks * c), 0.0f);     // (blocks, C)
    std::vector<float> part_sq(static_cast<size_t>(blocks * c), 0.0f);  // (blocks, C)
    float* sp = part.data();
    float* qp = part_sq.data();
    const float* kp = k0.data();
    parallel_for(0, blocks, 1, [x, sp, qp, kp, rows, c](int64_t lo, int64_t hi) {
      for (int64_t blk = lo; blk < hi; ++blk) {
        shifted_sums_rows(x, blk * kRows, std::min(rows, (blk + 1) * kRows), c, kp, sp + blk * c,
                          qp + blk * c);
      }
    });
    const std::vector<double> sum = combine(part, blocks, c), sum_sq = combine(part_sq, blocks, c);
    for (int64_t ch = 0; ch < c; ++ch) {  // Note [One-pass batch statistics] in batch_norm.cpp
      const size_t i = static_cast<size_t>(ch);
      const double mean_d = sum[i] / static_cast<double>(rows);
      const double mu = static_cast<double>(k0[i]) + mean_d;
      const double var = std::max(sum_sq[i] / static_cast<double>(rows) - mean_d * mean_d, 0.0);
      if (update) {
        float& rm = at(running_mean, ch);
        rm = static_cast<float>((1 - momentum) * rm + momentum * mu);
      }
      if (update_var) {
        float& rv = at(running_var, ch);
        rv = static_cast<float>((1 - momentum) * rv + momentum * var *
                                                         static_cast<double>(rows) /
                                                         static_cast<double>(rows - 1));
      }
      mean[ch] = static_cast<float>(mu);
      invstd[ch] = static_cast<float>(1.0 / std::sqrt(var + eps));
    }
  } else {
    for (int64_t ch = 0; ch < c; ++ch) {
      const double mu = at(running_mean, ch), var = at(running_var, ch);
      mean[ch] = static_cast<float>(mu);
      invstd[ch] = static_cast<float>(1.0 / std::sqrt(var + eps));
    }
  }
  // The running statistics were written in place (see Note [Saved tensor versions]).
  if (update) running_mean.impl()->storage->bump_version();
  if (update_var) running_var.impl()->storage->bump_version();
}

}  // namespace nhwc_bn

std::tuple<Tensor, Tensor, Tensor> batch_norm_bf16_nhwc_forward(
    const Tensor& input, const Tensor& residual, const Tensor& weight, const Tensor& bias,
    const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
    double eps, bool relu, const char* op, Tensor* relu_bits) {
  check_nhwc_input(input, op);
  const int64_t c = input.size(1), rows = input.size(0) * input.size(2) * input.size(3);
  const Tensor r = residual.defined() ? channels_last(residual) : Tensor();  // (N, C, H, W) NHWC
  const Tensor w = weight.defined() ? contiguous(weight) : Tensor();
  const Tensor b = bias.defined() ? contiguous(bias) : Tensor();
  Tensor out = empty_channels_last(input.sizes(), kBFloat16);  // (N, C, H, W) NHWC
  Tensor save_mean = empty({c}, kFloat32);                     // (C)
  Tensor save_invstd = empty({c}, kFloat32);                   // (C)
  const bool bits = relu && relu_bits != nullptr;
  if (bits) *relu_bits = empty({rows, 2 * bit_words(c)}, kUInt8);  // (R, words) 16-bit words
  uint16_t* mp = bits ? reinterpret_cast<uint16_t*>(relu_bits->data_ptr<uint8_t>()) : nullptr;
  const BFloat16* xp = input.data_ptr<BFloat16>();  // (R, C), as the residual and the output
  const BFloat16* rp = r.defined() ? r.data_ptr<BFloat16>() : nullptr;
  BFloat16* yp = out.data_ptr<BFloat16>();
  const float* wp = w.defined() ? w.data_ptr<float>() : nullptr;
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  float* mean_p = save_mean.data_ptr<float>();
  float* invstd_p = save_invstd.data_ptr<float>();
  const size_t cs = static_cast<size_t>(c);
  batch_statistics(xp, rows, c, running_mean, running_var, training, momentum, eps, mean_p,
                   invstd_p);
  std::vector<float> scale(cs), shift(cs);  // (C)
  affine_of(mean_p, invstd_p, wp, bp, c, scale.data(), shift.data());
  const float* scp = scale.data();
  const float* shp = shift.data();
  const Form form = rp != nullptr ? Form::AddRelu : relu ? Form::Relu : Form::Plain;
  parallel_for(0, rows, kRows, [xp, rp, yp, mp, scp, shp, c, form](int64_t lo, int64_t hi) {
    if (form == Form::AddRelu && mp != nullptr) {
      forward_rows<Form::AddRelu, true>(xp, rp, yp, mp, lo, hi, c, scp, shp);
    } else if (form == Form::AddRelu) {
      forward_rows<Form::AddRelu>(xp, rp, yp, mp, lo, hi, c, scp, shp);
    } else if (form == Form::Relu && mp != nullptr) {
      forward_rows<Form::Relu, true>(xp, rp, yp, mp, lo, hi, c, scp, shp);
    } else if (form == Form::Relu) {
      forward_rows<Form::Relu>(xp, rp, yp, mp, lo, hi, c, scp, shp);
    } else {
      forward_rows<Form::Plain>(xp, rp, yp, mp, lo, hi, c, scp, shp);
    }
  });
  return {out, save_mean, save_invstd};
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_bf16_nhwc_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& bias,
    const Tensor& save_mean, const Tensor& save_invstd, const Tensor& output, Mask mask,
    bool training, bool need_input, bool need_weight, bool need_bias, Tensor* grad_residual,
    const char* op) {
  check_nhwc_input(input, op);
  const int64_t c = input.size(1), rows = input.size(0) * input.size(2) * input.size(3);
  const Tensor gy = channels_last(grad_output);  // (N, C, H, W) NHWC
  const Tensor y = mask == Mask::Output ? channels_last(output) : Tensor();
  if (mask == Mask::Bits) {
    LS_CHECK(output.defined() && output.dtype() == kUInt8 && output.dim() == 2 &&
                 output.size(0) == rows && output.size(1) == 2 * bit_words(c) &&
                 output.is_contiguous(),
             op, ": the ReLU's bit mask must be the (", rows, ", ", 2 * bit_words(c),
             ") uint8 tensor the forward wrote for this input, but got ",
             output.defined() ? output.shape_str() : std::string("an undefined tensor"),
             "; pass the relu_bits of batch_norm_add_relu_forward");
  }
  const Tensor w = weight.defined() ? contiguous(weight) : Tensor();
  const Tensor b = mask == Mask::Input && bias.defined() ? contiguous(bias) : Tensor();
  const Tensor mean_t = contiguous(save_mean), invstd_t = contiguous(save_invstd);
  const IntList& sizes = input.sizes();
  Tensor grad_input = need_input ? empty_channels_last(sizes, kBFloat16) : Tensor();
  Tensor grad_weight = need_weight ? empty({c}, kFloat32) : Tensor();  // (C)
  Tensor grad_bias = need_bias ? empty({c}, kFloat32) : Tensor();      // (C)
  if (grad_residual != nullptr) *grad_residual = empty_channels_last(sizes, kBFloat16);
  const float* wp = w.defined() ? w.data_ptr<float>() : nullptr;
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  const float* mean_p = mean_t.data_ptr<float>();
  const float* invstd_p = invstd_t.data_ptr<float>();
  BFloat16* gxp = need_input ? grad_input.data_ptr<BFloat16>() : nullptr;
  BFloat16* grp = grad_residual != nullptr ? grad_residual->data_ptr<BFloat16>() : nullptr;
  const size_t cs = static_cast<size_t>(c);
  std::vector<float> scale(cs), shift(cs), a(cs), bx(cs), c0(cs);  // (C)
  affine_of(mean_p, invstd_p, wp, bp, c, scale.data(), shift.data());
  const Operands p{
      gy.data_ptr<BFloat16>(),  // (R, C), as x, y and the results
      input.data_ptr<BFloat16>(),
      y.defined() ? y.data_ptr<BFloat16>() : nullptr,
      scale.data(),
      shift.data(),
      mean_p,
      a.data(),
      bx.data(),
      c0.data(),
      mask == Mask::Bits ? reinterpret_cast<const uint16_t*>(output.data_ptr<uint8_t>()) : nullptr,
      bit_words(c)};
  // The sums: for the parameters' gradients, training's grad_input, and the pass
  // that writes the residual's gradient. Eval's grad_input alone needs none.
  const bool sums = need_weight || need_bias || (need_input && training) || grp != nullptr;
  std::vector<double> sum_g(cs, 0.0), sum_g_xmu(cs, 0.0);  // (C)
  if (sums) {
    const int64_t blocks = (rows + kRows - 1) / kRows;
    std::vector<float> part_g(static_cast<size_t>(blocks * c), 0.0f);    // (blocks, C)
    std::vector<float> part_xmu(static_cast<size_t>(blocks * c), 0.0f);  // (blocks, C)
    float* pg = part_g.data();
    float* px = part_xmu.data();
    parallel_for(0, blocks, 1, [&p, grp, pg, px, rows, c, mask](int64_t lo, int64_t hi) {
      for (int64_t blk = lo; blk < hi; ++blk) {
        const int64_t r0 = blk * kRows, r1 = std::min(rows, r0 + kRows);
        with_mask(mask, [&]<Mask M>() {
          grad_sums_rows<M>(p, grp, r0, r1, c, pg + blk * c, px + blk * c);
        });
      }
    });
    sum_g = combine(part_g, blocks, c);
    sum_g_xmu = combine(part_xmu, blocks, c);
  }
  float* gwp = need_weight ? grad_weight.data_ptr<float>() : nullptr;
  float* gbp = need_bias ? grad_bias.data_ptr<float>() : nullptr;
  grad_coefficients(sum_g, sum_g_xmu, wp, mean_p, invstd_p, rows, training, gwp, gbp, a.data(),
                    bx.data(), c0.data());
  if (gxp == nullptr) return {grad_input, grad_weight, grad_bias};
  parallel_for(0, rows, kRows, [&p, gxp, c, mask](int64_t lo, int64_t hi) {
    with_mask(mask, [&]<Mask M>() { grad_input_rows<M>(p, gxp, lo, hi, c); });
  });
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace lockstep::native
