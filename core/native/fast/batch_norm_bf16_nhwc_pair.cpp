// core/native/fast/batch_norm_bf16_nhwc_pair.cpp — a block's two batch norms in one
// kernel: relu(bn(x) + bn_r(r)) on channels-last bfloat16 activations, and its backward.
//
// § Note [Downsample batch norm folded]
// A ResNet block that changes shape ends in relu(bn3(conv3(.)) + bn_d(conv_d(x))):
// the residual is itself a batch norm's output. As batch_norm then
// batch_norm_add_relu, bn_d's output is written in full and read back by the add,
// and in backward the residual's gradient gm = grad * (out > 0) is written by
// batch_norm_add_relu's backward and read back by bn_d's: per step, four
// activation-sized passes over a tensor that never needs to exist (ResNet50 bf16,
// batch 8: 96 MB of its non-GEMM bytes, Note [Profiler bytes]). Here:
//   forward   the statistics of x and of r (one pass each, batch_statistics), then
//             one pass: y = max(x scale + shift + (r rscale + rshift), 0), and the
//             ReLU's mask bits as batch_norm_add_relu writes them;
//   backward  one sums pass reading grad, the mask, x and r: sum gm, sum gm (x - mean),
//             sum gm (r - r_mean) (sum gm is both batch norms' bias gradient), then
//             one pass writing dx and dr, each batch norm's grad_input formula of gm.
// The reference is the two ops in turn (batch_norm_pair.cpp, the Planes path and
// LOCKSTEP_BF16_BN_PAIR=0): the backward's five results equal it bit for bit, since
// the reference's stored gm is exact in bf16 and every sum runs in the same order
// with the same expression; the forward's output differs from it only by the
// reference's extra rounding of bn_r(r) to bf16 before the add, and its statistics
// (save_mean, save_invstd, the running ones) are equal bit for bit
// (tests/core/test_batch_norm_pair.cpp).
//
// Read before: core/native/fast/batch_norm_bf16_nhwc_rows.h, core/native/batch_norm_pair.cpp.
// Read next: autograd/functions/batch_norm_pair.cpp.
#include <string>
#include <vector>

#include "core/native/batch_norm_bf16.h"
#include "core/native/fast/batch_norm_bf16_nhwc_rows.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/parallel.h"

namespace lockstep::native {

using namespace nhwc_bn;  // the row loops: fast/batch_norm_bf16_nhwc_rows.h

BatchNormPairForward batch_norm_bf16_nhwc_pair_forward(const Tensor& input,
                                                       const BatchNormTensors& bn,
                                                       const Tensor& residual,
                                                       const BatchNormTensors& residual_bn,
                                                       bool training, double momentum, double eps,
                                                       Tensor* relu_bits, const char* op) {
  check_nhwc_input(input, op);
  check_nhwc_input(residual, op);
  const int64_t c = input.size(1), rows = input.size(0) * input.size(2) * input.size(3);
  const Tensor w = bn.weight.defined() ? contiguous(bn.weight) : Tensor();
  const Tensor b = bn.bias.defined() ? contiguous(bn.bias) : Tensor();
  const Tensor rw = residual_bn.weight.defined() ? contiguous(residual_bn.weight) : Tensor();
  const Tensor rb = residual_bn.bias.defined() ? contiguous(residual_bn.bias) : Tensor();
  BatchNormPairForward f;
  f.output = empty_channels_last(input.sizes(), kBFloat16);  // (N, C, H, W) NHWC
  f.save_mean = empty({c}, kFloat32);                        // (C), as the three below
  f.save_invstd = empty({c}, kFloat32);
  f.residual_save_mean = empty({c}, kFloat32);
  f.residual_save_invstd = empty({c}, kFloat32);
  if (relu_bits != nullptr) *relu_bits = empty({rows, 2 * bit_words(c)}, kUInt8);  // (R, words)
  const BFloat16* xp = input.data_ptr<BFloat16>();  // (R, C), as r and the output
  const BFloat16* rp = residual.data_ptr<BFloat16>();
  float* mean = f.save_mean.data_ptr<float>();
  float* invstd = f.save_invstd.data_ptr<float>();
  float* r_mean = f.residual_save_mean.data_ptr<float>();
  float* r_invstd = f.residual_save_invstd.data_ptr<float>();
  batch_statistics(xp, rows, c, bn.running_mean, bn.running_var, training, momentum, eps, mean,
                   invstd);
  batch_statistics(rp, rows, c, residual_bn.running_mean, residual_bn.running_var, training,
                   momentum, eps, r_mean, r_invstd);
  const size_t cs = static_cast<size_t>(c);
  std::vector<float> scale(cs), shift(cs), rscale(cs), rshift(cs);  // (C) each
  const auto ptr = [](const Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; };
  affine_of(mean, invstd, ptr(w), ptr(b), c, scale.data(), shift.data());
  affine_of(r_mean, r_invstd, ptr(rw), ptr(rb), c, rscale.data(), rshift.data());
  BFloat16* yp = f.output.data_ptr<BFloat16>();
  uint16_t* mp =
      relu_bits != nullptr ? reinterpret_cast<uint16_t*>(relu_bits->data_ptr<uint8_t>()) : nullptr;
  const float *scp = scale.data(), *shp = shift.data(), *rscp = rscale.data(),
              *rshp = rshift.data();
  parallel_for(0, rows, kRows, [=](int64_t lo, int64_t hi) {
    if (mp != nullptr) {
      add_bn_relu_rows<true>(xp, rp, yp, mp, lo, hi, c, scp, shp, rscp, rshp);
    } else {
      add_bn_relu_rows<false>(xp, rp, yp, mp, lo, hi, c, scp, shp, rscp, rshp);
    }
  });
  return f;
}

BatchNormPairGrads batch_norm_bf16_nhwc_pair_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& save_mean,
    const Tensor& save_invstd, const Tensor& residual, const Tensor& residual_weight,
    const Tensor& residual_save_mean, const Tensor& residual_save_invstd, const Tensor& mask_source,
    Mask mask, bool training, const std::array<bool, 6>& need, const char* op) {
  check_nhwc_input(input, op);
  check_nhwc_input(residual, op);
  const int64_t c = input.size(1), rows = input.size(0) * input.size(2) * input.size(3);
  const int64_t words = bit_words(c);
  const std::string got =
      mask_source.defined() ? mask_source.shape_str() : std::string("an undefined tensor");
  if (mask == Mask::Bits) {
    LS_CHECK(mask_source.defined() && mask_source.dtype() == kUInt8 && mask_source.dim() == 2 &&
                 mask_source.size(0) == rows && mask_source.size(1) == 2 * words &&
                 mask_source.is_contiguous(),
             op, ": the ReLU's bit mask must be the (", rows, ", ", 2 * words,
             ") uint8 tensor the forward wrote for this input, but got ", got,
             "; pass the relu_bits of batch_norm_pair_forward");
  } else {
    LS_CHECK(mask_source.defined() && mask_source.sizes() == input.sizes() &&
                 mask_source.dtype() == kBFloat16,
             op, ": the ReLU's mask must be the forward's bfloat16 output ", input.shape_str(),
             ", but got ", got, "; pass the output of batch_norm_pair_forward");
  }
  const Tensor gy = channels_last(grad_output);  // (N, C, H, W) NHWC
  const Tensor y = mask == Mask::Output ? channels_last(mask_source) : Tensor();
  const Tensor w = weight.defined() ? contiguous(weight) : Tensor();
  const Tensor rw = residual_weight.defined() ? contiguous(residual_weight) : Tensor();
  const Tensor mean_t = contiguous(save_mean), invstd_t = contiguous(save_invstd);
  const Tensor r_mean_t = contiguous(residual_save_mean);
  const Tensor r_invstd_t = contiguous(residual_save_invstd);
  BatchNormPairGrads d;
  if (need[0]) d.grad_input = empty_channels_last(input.sizes(), kBFloat16);
  if (need[1]) d.grad_weight = empty({c}, kFloat32);  // (C), as the other parameters'
  if (need[2]) d.grad_bias = empty({c}, kFloat32);
  if (need[3]) d.grad_residual = empty_channels_last(input.sizes(), kBFloat16);
  if (need[4]) d.grad_residual_weight = empty({c}, kFloat32);
  if (need[5]) d.grad_residual_bias = empty({c}, kFloat32);
  const size_t cs = static_cast<size_t>(c);
  std::vector<float> a(cs), bx(cs), c0(cs), ra(cs), rbx(cs), rc0(cs);  // (C) each, filled below
  Operands p{gy.data_ptr<BFloat16>(),  // (R, C), as x, y, r and the results
             input.data_ptr<BFloat16>(),
             y.defined() ? y.data_ptr<BFloat16>() : nullptr,
             nullptr,
             nullptr,
             mean_t.data_ptr<float>(),
             nullptr,
             nullptr,
             nullptr,
             mask == Mask::Bits ? reinterpret_cast<const uint16_t*>(mask_source.data_ptr<uint8_t>())
                                : nullptr,
             words};
  p.r = residual.data_ptr<BFloat16>();
  p.r_mean = r_mean_t.data_ptr<float>();
  // The sums, in kRows blocks combined in order (Note [bfloat16 batch norm on
  // channels-last activations] in batch_norm_bf16_nhwc.cpp). Eval's two grad_inputs
  // alone would need none; the pair computes them anyway (ResNet trains).
  const int64_t blocks = (rows + kRows - 1) / kRows;
  const size_t part_size = static_cast<size_t>(blocks * c);
  std::vector<float> part_g(part_size, 0.0f), part_xmu(part_size, 0.0f), part_rmu(part_size, 0.0f);
  float *pg = part_g.data(), *px = part_xmu.data(), *pr = part_rmu.data();
  parallel_for(0, blocks, 1, [&p, pg, px, pr, rows, c, mask](int64_t lo, int64_t hi) {
    for (int64_t blk = lo; blk < hi; ++blk) {
      const int64_t r0 = blk * kRows, r1 = std::min(rows, r0 + kRows);
      if (mask == Mask::Bits) {
        grad_sums_rows<Mask::Bits, true>(p, nullptr, r0, r1, c, pg + blk * c, px + blk * c,
                                         pr + blk * c);
      } else {
        grad_sums_rows<Mask::Output, true>(p, nullptr, r0, r1, c, pg + blk * c, px + blk * c,
                                           pr + blk * c);
      }
    }
  });
  const std::vector<double> sum_g = combine(part_g, blocks, c);
  const auto ptr = [](const Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; };
  grad_coefficients(sum_g, combine(part_xmu, blocks, c), ptr(w), p.mean, invstd_t.data_ptr<float>(),
                    rows, training, ptr(d.grad_weight), ptr(d.grad_bias), a.data(), bx.data(),
                    c0.data());
  grad_coefficients(sum_g, combine(part_rmu, blocks, c), ptr(rw), p.r_mean,
                    r_invstd_t.data_ptr<float>(), rows, training, ptr(d.grad_residual_weight),
                    ptr(d.grad_residual_bias), ra.data(), rbx.data(), rc0.data());
  p.a = a.data();
  p.bx = bx.data();
  p.c0 = c0.data();
  p.ra = ra.data();
  p.rbx = rbx.data();
  p.rc0 = rc0.data();
  BFloat16* dxp = need[0] ? d.grad_input.data_ptr<BFloat16>() : nullptr;
  BFloat16* drp = need[3] ? d.grad_residual.data_ptr<BFloat16>() : nullptr;
  if (dxp == nullptr && drp == nullptr) return d;
  parallel_for(0, rows, kRows, [&p, dxp, drp, c, mask](int64_t lo, int64_t hi) {
    if (mask == Mask::Bits) {
      grad_input_rows<Mask::Bits, true>(p, dxp, lo, hi, c, drp);
    } else {
      grad_input_rows<Mask::Output, true>(p, dxp, lo, hi, c, drp);
    }
  });
  return d;
}

}  // namespace lockstep::native
