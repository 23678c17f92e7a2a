// tests/core/test_batch_norm_relu_pool.cpp — Note [Stem batch norm, ReLU and max-pool in one
// pass] (core/native/fast/batch_norm_relu_pool_bf16_nhwc.cpp): max_pool2d(relu(bn(x))) by the
// channels-last bfloat16 kernel against its reference, batch_norm_relu then max_pool2d and
// their backwards in turn, run here op by op:
//   - the output, the statistics (save_mean, save_invstd, the running ones) and all three
//     gradients bit for bit;
//   - each window offset points at the element max_pool2d's index names;
//   - ResNet's 3x3 stride-2 pool with padding 1 (overlapping windows), a 2x2 tiling pool and
//     a 3x3 stride-1 pool; C a multiple of the lanes and not; odd image sizes; training and
//     eval; 1 and 2 threads;
//   - the float32 NCHW path is the reference itself, and operands that do not fit get errors
//     naming the op.
// Read before: core/native/batch_norm_relu_pool.h.
#include <doctest/doctest.h>

#include <array>
#include <vector>

#include "core/factory.h"
#include "core/native/batch_norm_relu_pool.h"
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

struct Pool {
  ls::IntList kernel, stride, padding;
};

}  // namespace

TEST_CASE(
    "batch_norm_relu_pool: the channels-last bf16 kernel against batch_norm_relu then max_pool2d") {
  const int saved = ls::get_num_threads();
  const std::vector<Pool> pools = {
      {{3, 3}, {2, 2}, {1, 1}}, {{2, 2}, {2, 2}, {0, 0}}, {{3, 3}, {1, 1}, {1, 1}}};
  for (int threads : {1, 2}) {
    ls::set_num_threads(threads);
    for (const Pool& pool : pools) {
      for (int64_t c : {20, 64}) {
        for (bool training : {true, false}) {
          CAPTURE(threads);
          CAPTURE(pool.kernel[0]);
          CAPTURE(pool.stride[0]);
          CAPTURE(c);
          CAPTURE(training);
          ls::manual_seed(11 + c + pool.stride[0]);
          const ls::IntList shape{2, c, 13, 11};
          // Offset so that about a third of the batch norm's outputs are cut by the ReLU.
          const ls::Tensor x = cl_bf16(shape, 1.5, 0.3);
          const Bn bn{ls::randn({c}), ls::randn({c}) * 0.5 + 0.2, ls::randn({c}) * 0.1,
                      ls::rand({c}) + 0.5};
          // The kernel.
          const Bn bn_k = bn.clone();
          const nv::BatchNormReluPoolForward f = nv::batch_norm_relu_max_pool2d_forward(
              x, bn_k.tensors(), training, 0.1, 1e-5, pool.kernel, pool.stride, pool.padding);
          REQUIRE(f.argmax.dtype() == ls::kUInt8);
          CHECK(nv::is_channels_last(f.output));
          // The reference, op by op.
          const Bn bn_r = bn.clone();
          auto [y, mean, invstd] =
              nv::batch_norm_relu_forward(x, bn_r.w, bn_r.b, bn_r.rm, bn_r.rv, training, 0.1, 1e-5);
          auto [ref_out, idx] = nv::max_pool2d_forward(y, pool.kernel, pool.stride, pool.padding);
          CHECK(same_bits(f.output, ref_out));
          CHECK(same_bits(f.save_mean, mean));
          CHECK(same_bits(f.save_invstd, invstd));
          CHECK(same_bits(bn_k.rm, bn_r.rm));
          CHECK(same_bits(bn_k.rv, bn_r.rv));
          // Each window offset names max_pool2d's index: (iy - wy0) kW + (ix - wx0).
          const int64_t oh = ref_out.size(2), ow = ref_out.size(3), w_in = shape[3];
          const std::vector<int64_t> iv = nv::contiguous(idx).to_vector<int64_t>();  // NCHW
          const std::vector<uint8_t> ov = f.argmax.to_vector<uint8_t>();             // (N oH oW, C)
          int64_t wrong = 0;
          for (int64_t n = 0; n < shape[0]; ++n) {
            for (int64_t ch = 0; ch < c; ++ch) {
              for (int64_t oy = 0; oy < oh; ++oy) {
                for (int64_t ox = 0; ox < ow; ++ox) {
                  const int64_t at = iv[static_cast<size_t>(((n * c + ch) * oh + oy) * ow + ox)];
                  const int64_t dy = at / w_in - (oy * pool.stride[0] - pool.padding[0]);
                  const int64_t dx = at % w_in - (ox * pool.stride[1] - pool.padding[1]);
                  const int64_t off = ov[static_cast<size_t>(((n * oh + oy) * ow + ox) * c + ch)];
                  wrong += off != dy * pool.kernel[1] + dx;
                }
              }
            }
          }
          CHECK(wrong == 0);
          // Backward: every gradient bit for bit the reference's.
          const ls::Tensor gy = cl_bf16({2, c, oh, ow}, 1.0, 0.0);
          const std::array<ls::Tensor, 3> d = nv::batch_norm_relu_max_pool2d_backward(
              gy, x, bn.w, bn.b, f.save_mean, f.save_invstd, f.argmax, pool.kernel, pool.stride,
              pool.padding, training, {true, true, true});
          const ls::Tensor g = nv::max_pool2d_backward(
              gy, idx, shape, nv::max_pool2d_tile(pool.kernel, pool.stride, pool.padding));
          auto [gx, gw, gb] = nv::batch_norm_relu_backward_from_input(
              g, x, bn.w, bn.b, mean, invstd, training, true, true, true);
          CHECK(nv::is_channels_last(d[0]));
          CHECK(same_bits(d[0], gx));
          CHECK(same_bits(d[1], gw));
          CHECK(same_bits(d[2], gb));
          // Only what is asked for.
          const std::array<ls::Tensor, 3> only_w = nv::batch_norm_relu_max_pool2d_backward(
              gy, x, bn.w, bn.b, f.save_mean, f.save_invstd, f.argmax, pool.kernel, pool.stride,
              pool.padding, training, {false, true, false});
          CHECK(!only_w[0].defined());
          CHECK(!only_w[2].defined());
          CHECK(same_bits(only_w[1], gw));
        }
      }
    }
  }
  ls::set_num_threads(saved);
}

TEST_CASE("batch_norm_relu_pool: float32 runs the reference, and errors name the op") {
  ls::manual_seed(3);
  const ls::Tensor x = ls::randn({2, 4, 6, 6});
  const ls::Tensor w = ls::randn({4}), b = ls::randn({4});
  ls::Tensor rm = ls::zeros({4}), rv = ls::ones({4});
  const nv::BatchNormReluPoolForward f = nv::batch_norm_relu_max_pool2d_forward(
      x, {w, b, rm, rv}, true, 0.1, 1e-5, {3, 3}, {2, 2}, {1, 1});
  CHECK(f.argmax.dtype() == ls::kInt64);  // max_pool2d's indices
  auto [y, mean, invstd] =
      nv::batch_norm_relu_forward(x, w, b, ls::zeros({4}), ls::ones({4}), true, 0.1, 1e-5);
  auto [ref, idx] = nv::max_pool2d_forward(y, {3, 3}, {2, 2}, {1, 1});
  CHECK(same_bits(f.output, ref));
  CHECK(ls::equal(f.argmax, idx));
  // A window too large for a byte on the bf16 kernel takes the reference too.
  const ls::Tensor big = cl_bf16({1, 4, 20, 20}, 1.0, 0.0);
  const nv::BatchNormReluPoolForward fb = nv::batch_norm_relu_max_pool2d_forward(
      big, {w, b, ls::Tensor(), ls::Tensor()}, true, 0.1, 1e-5, {16, 16}, {4, 4}, {0, 0});
  CHECK(fb.argmax.dtype() == ls::kInt64);
  // Errors.
  CHECK_THROWS_WITH(nv::batch_norm_relu_max_pool2d_forward(ls::randn({4, 6, 6}), {w, b, rm, rv},
                                                           true, 0.1, 1e-5, {3, 3}, {2, 2}, {1, 1}),
                    doctest::Contains("batch_norm_relu_max_pool2d: expected a 4-d input"));
  CHECK_THROWS_WITH(nv::batch_norm_relu_max_pool2d_forward(x, {w, b, rm, rv}, true, 0.1, 1e-5,
                                                           {3, 3}, {2, 2}, {2, 2}),
                    doctest::Contains("batch_norm_relu_max_pool2d: padding"));
  const ls::Tensor xb = cl_bf16({2, 4, 6, 6}, 1.0, 0.0);
  CHECK_THROWS_WITH(nv::batch_norm_relu_max_pool2d_forward(xb, {ls::randn({3}), b, rm, rv}, true,
                                                           0.1, 1e-5, {3, 3}, {2, 2}, {1, 1}),
                    doctest::Contains("batch_norm_relu_max_pool2d"));
  const nv::BatchNormReluPoolForward fk = nv::batch_norm_relu_max_pool2d_forward(
      xb, {w, b, ls::Tensor(), ls::Tensor()}, true, 0.1, 1e-5, {3, 3}, {2, 2}, {1, 1});
  REQUIRE(fk.argmax.dtype() == ls::kUInt8);
  const ls::Tensor g = cl_bf16({2, 4, 3, 3}, 1.0, 0.0);
  CHECK_THROWS_WITH(nv::batch_norm_relu_max_pool2d_backward(
                        cl_bf16({2, 4, 4, 4}, 1.0, 0.0), xb, w, b, fk.save_mean, fk.save_invstd,
                        fk.argmax, {3, 3}, {2, 2}, {1, 1}, true, {true, true, true}),
                    doctest::Contains("grad_output must have the output's shape"));
  CHECK_THROWS_WITH(
      nv::batch_norm_relu_max_pool2d_backward(g, x, w, b, fk.save_mean, fk.save_invstd, fk.argmax,
                                              {3, 3}, {2, 2}, {1, 1}, true, {true, true, true}),
      doctest::Contains("window offsets (uint8) come from the channels-last"));
  CHECK_THROWS_WITH(nv::batch_norm_relu_max_pool2d_backward(
                        g, xb, w, b, fk.save_mean, fk.save_invstd, fk.argmax.narrow(0, 0, 9),
                        {3, 3}, {2, 2}, {1, 1}, true, {true, true, true}),
                    doctest::Contains("the window offsets must be the (18, 4) uint8 tensor"));
}
