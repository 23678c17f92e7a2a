// tests/core/test_batch_norm_pair.cpp — Note [Downsample batch norm folded]
// (core/native/fast/batch_norm_bf16_nhwc_pair.cpp): relu(bn(x) + bn_r(r)) by the
// channels-last bfloat16 kernel against its reference, batch_norm then
// batch_norm_add_relu and their backwards in turn, run here op by op:
//   - both batch norms' statistics (save_mean, save_invstd, the running ones) and
//     all six gradients bit for bit, with the mask from the bits and from the output;
//   - the output within one bf16 rounding of the exact value (the reference rounds
//     bn_r(r) to bf16 before the add; the kernel does not), and its mask bits y > 0;
//   - C a multiple of 16 and not, training and eval, 1 and 2 threads;
//   - the float32 NCHW path is the reference itself (equal to it exactly), and the
//     errors of operands that do not fit name the op.
// Read before: core/native/batch_norm_pair.h.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/factory.h"
#include "core/native/batch_norm_pair.h"
#include "core/native/fused_relu.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "tests/support/batch_norm_operands.h"
#include "tests/support/compare.h"

namespace ls = lockstep;
namespace nv = lockstep::native;
using ls::testing::Bn;  // tests/support/batch_norm_operands.h
using ls::testing::cl_bf16;
using ls::testing::same_bits;  // tests/support/compare.h

namespace {

Bn make_bn(int64_t c) {
  return {ls::randn({c}), ls::randn({c}), ls::randn({c}) * 0.1, ls::rand({c}) + 0.5};
}

// The values of an (N, C, H, W) tensor of either order as float, in NCHW order.
std::vector<float> values(const ls::Tensor& t) {
  return nv::to_dtype(nv::contiguous(t), ls::kFloat32).to_vector<float>();
}

}  // namespace

TEST_CASE(
    "batch_norm_pair: the channels-last bf16 kernel against batch_norm then batch_norm_add_relu") {
  const int saved = ls::get_num_threads();
  for (int threads : {1, 2}) {
    ls::set_num_threads(threads);
    for (int64_t c : {24, 64}) {
      for (bool training : {true, false}) {
        CAPTURE(threads);
        CAPTURE(c);
        CAPTURE(training);
        ls::manual_seed(7 + c);
        const ls::IntList shape{3, c, 5, 7};
        const ls::Tensor x = cl_bf16(shape, 1.5, 0.3), r = cl_bf16(shape, 2.0, -0.2);
        const ls::Tensor gy = cl_bf16(shape, 1.0, 0.0);
        const Bn bn = make_bn(c), rbn = make_bn(c);
        // The kernel.
        const Bn bn_k = bn.clone(), rbn_k = rbn.clone();
        ls::Tensor bits;
        const nv::BatchNormPairForward f = nv::batch_norm_pair_forward(
            x, bn_k.tensors(), r, rbn_k.tensors(), training, 0.1, 1e-5, &bits);
        REQUIRE(bits.defined());
        CHECK(nv::is_channels_last(f.output));
        // The reference, op by op.
        const Bn bn_r = bn.clone(), rbn_r = rbn.clone();
        auto [yr, r_mean, r_invstd] =
            nv::batch_norm_forward(r, rbn_r.w, rbn_r.b, rbn_r.rm, rbn_r.rv, training, 0.1, 1e-5);
        auto [ref_out, mean, invstd] = nv::batch_norm_add_relu_forward(
            x, yr, bn_r.w, bn_r.b, bn_r.rm, bn_r.rv, training, 0.1, 1e-5);
        CHECK(same_bits(f.save_mean, mean));
        CHECK(same_bits(f.save_invstd, invstd));
        CHECK(same_bits(f.residual_save_mean, r_mean));
        CHECK(same_bits(f.residual_save_invstd, r_invstd));
        for (auto [k, ref] : {std::pair{&bn_k, &bn_r}, std::pair{&rbn_k, &rbn_r}}) {
          CHECK(same_bits(k->rm, ref->rm));
          CHECK(same_bits(k->rv, ref->rv));
        }
        // Output: within one bf16 rounding of the exact value from these statistics.
        const std::vector<float> out = values(f.output), xv = values(x), rv = values(r);
        const std::vector<float> m = f.save_mean.to_vector<float>(),
                                 is = f.save_invstd.to_vector<float>();
        const std::vector<float> rm = f.residual_save_mean.to_vector<float>();
        const std::vector<float> ris = f.residual_save_invstd.to_vector<float>();
        const std::vector<float> w = bn.w.to_vector<float>(), b = bn.b.to_vector<float>();
        const std::vector<float> rw = rbn.w.to_vector<float>(), rb = rbn.b.to_vector<float>();
        const int64_t hw = 5 * 7;
        int64_t worse = 0;
        for (size_t e = 0; e < out.size(); ++e) {
          const size_t ch = (e / static_cast<size_t>(hw)) % static_cast<size_t>(c);
          const double exact =
              std::max(0.0, (xv[e] - m[ch]) * double(is[ch]) * w[ch] + b[ch] +
                                (rv[e] - rm[ch]) * double(ris[ch]) * rw[ch] + rb[ch]);
          if (std::abs(out[e] - exact) > std::ldexp(std::abs(exact), -8) + 1e-5) ++worse;
        }
        CHECK(worse == 0);
        // The bits are y > 0 of the stored output.
        const ls::Tensor ones = cl_bf16(shape, 0.0, 1.0);
        auto masked = nv::batch_norm_add_relu_backward_bits(ones, x, bn.w, mean, invstd, bits,
                                                            training, false, false, false);
        const std::vector<float> mv = values(std::get<3>(masked));
        int64_t wrong_bits = 0;
        for (size_t e = 0; e < out.size(); ++e) wrong_bits += (mv[e] > 0) != (out[e] > 0);
        CHECK(wrong_bits == 0);
        // Backward: every gradient bit for bit the reference's (bits and output masks).
        auto [gi, gw, gb, gm] = nv::batch_norm_add_relu_backward_bits(
            gy, x, bn.w, f.save_mean, f.save_invstd, bits, training, true, true, true);
        auto [gr, grw, grb] = nv::batch_norm_backward(
            gm, r, rbn.w, f.residual_save_mean, f.residual_save_invstd, training, true, true, true);
        for (bool in_bits : {true, false}) {
          CAPTURE(in_bits);
          const nv::BatchNormPairGrads d = nv::batch_norm_pair_backward(
              gy, x, bn.w, f.save_mean, f.save_invstd, r, rbn.w, f.residual_save_mean,
              f.residual_save_invstd, in_bits ? bits : f.output, in_bits, training,
              {true, true, true, true, true, true});
          CHECK(same_bits(d.grad_input, gi));
          CHECK(same_bits(d.grad_weight, gw));
          CHECK(same_bits(d.grad_bias, gb));
          CHECK(same_bits(d.grad_residual, gr));
          CHECK(same_bits(d.grad_residual_weight, grw));
          CHECK(same_bits(d.grad_residual_bias, grb));
        }
        // Only some gradients asked for: those, and nothing else.
        const nv::BatchNormPairGrads part = nv::batch_norm_pair_backward(
            gy, x, bn.w, f.save_mean, f.save_invstd, r, rbn.w, f.residual_save_mean,
            f.residual_save_invstd, bits, true, training, {false, false, true, true, false, false});
        CHECK_FALSE(part.grad_input.defined());
        CHECK_FALSE(part.grad_weight.defined());
        CHECK_FALSE(part.grad_residual_weight.defined());
        CHECK_FALSE(part.grad_residual_bias.defined());
        CHECK(same_bits(part.grad_bias, gb));
        CHECK(same_bits(part.grad_residual, gr));
      }
    }
  }
  ls::set_num_threads(saved);
}

TEST_CASE("batch_norm_pair: float32 NCHW runs the reference, equal to the two ops exactly") {
  ls::manual_seed(11);
  const ls::IntList shape{2, 6, 3, 4};
  const ls::Tensor x = ls::randn(shape), r = ls::randn(shape), gy = ls::randn(shape);
  const Bn bn = make_bn(6), rbn = make_bn(6);
  const Bn bn_k = bn.clone(), rbn_k = rbn.clone(), bn_r = bn.clone(), rbn_r = rbn.clone();
  ls::Tensor bits;
  const nv::BatchNormPairForward f =
      nv::batch_norm_pair_forward(x, bn_k.tensors(), r, rbn_k.tensors(), true, 0.1, 1e-5, &bits);
  CHECK_FALSE(
      bits.defined());  // no bits outside the channels-last bf16 kernel: the output is the mask
  auto [yr, r_mean, r_invstd] =
      nv::batch_norm_forward(r, rbn_r.w, rbn_r.b, rbn_r.rm, rbn_r.rv, true, 0.1, 1e-5);
  auto [out, mean, invstd] =
      nv::batch_norm_add_relu_forward(x, yr, bn_r.w, bn_r.b, bn_r.rm, bn_r.rv, true, 0.1, 1e-5);
  CHECK(same_bits(f.output, out));
  CHECK(same_bits(bn_k.rm, bn_r.rm));
  CHECK(same_bits(rbn_k.rv, rbn_r.rv));
  auto [gi, gw, gb, gm] =
      nv::batch_norm_add_relu_backward(gy, x, bn.w, mean, invstd, out, true, true, true, true);
  auto [gr, grw, grb] =
      nv::batch_norm_backward(gm, r, rbn.w, r_mean, r_invstd, true, true, true, true);
  const nv::BatchNormPairGrads d = nv::batch_norm_pair_backward(
      gy, x, bn.w, f.save_mean, f.save_invstd, r, rbn.w, f.residual_save_mean,
      f.residual_save_invstd, f.output, false, true, {true, true, true, true, true, true});
  CHECK(same_bits(d.grad_input, gi));
  CHECK(same_bits(d.grad_bias, gb));
  CHECK(same_bits(d.grad_residual, gr));
  CHECK(same_bits(d.grad_residual_weight, grw));
}

TEST_CASE("batch_norm_pair: operands that do not fit are refused, naming the op") {
  const ls::Tensor x = cl_bf16({2, 20, 3, 3}, 1.0, 0.0), gy = cl_bf16({2, 20, 3, 3}, 1.0, 0.0);
  const Bn bn = make_bn(20);
  CHECK_THROWS_WITH_AS(
      nv::batch_norm_pair_forward(x, bn.tensors(), cl_bf16({2, 20, 3, 4}, 1.0, 0.0), bn.tensors(),
                                  true, 0.1, 1e-5),
      doctest::Contains("batch_norm_add_batch_norm_relu: the residual must have the input's shape"),
      ls::Error);
  const Bn wrong{ls::randn({21}), ls::Tensor(), ls::Tensor(), ls::Tensor()};
  CHECK_THROWS_WITH_AS(
      nv::batch_norm_pair_forward(x, bn.tensors(), x, wrong.tensors(), true, 0.1, 1e-5),
      doctest::Contains("batch_norm_add_batch_norm_relu: weight must have shape [20]"), ls::Error);
  ls::Tensor bits;
  const nv::BatchNormPairForward f = nv::batch_norm_pair_forward(
      x, bn.clone().tensors(), x, bn.clone().tensors(), true, 0.1, 1e-5, &bits);
  REQUIRE(bits.defined());
  CHECK_THROWS_WITH_AS(nv::batch_norm_pair_backward(
                           gy, x, bn.w, f.save_mean, f.save_invstd, x, bn.w, f.residual_save_mean,
                           f.residual_save_invstd, nv::narrow(bits, 0, 0, 9), true, true,
                           {true, true, true, true, true, true}),
                       doctest::Contains("the ReLU's bit mask must be the (18, 4) uint8 tensor"),
                       ls::Error);
}
