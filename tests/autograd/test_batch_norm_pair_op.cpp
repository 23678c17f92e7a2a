// tests/autograd/test_batch_norm_pair_op.cpp — batch_norm_add_batch_norm_relu, the
// op a downsampling ResNet block ends in (Note [Downsample batch norm folded] in
// core/native/fast/batch_norm_bf16_nhwc_pair.cpp): in float64 the same values, six
// gradients and running statistics as batch_norm_add_relu(x, batch_norm(r)), in
// training and eval; gradcheck and gradgradcheck; on channels-last bf16 the
// kernel's gradients through the node, and the bytes the profiler counts for it
// (two activations fewer written and read than the two ops' each way, which the
// reference, LOCKSTEP_BF16_BN_PAIR=0, counts).
// Read before: autograd/functions/batch_norm_pair.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "core/factory.h"
#include "core/native/batch_norm_pair.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/nn_ops.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "tests/support/gradcheck.h"
#include "tests/support/profiler_rows.h"

namespace ls = lockstep;
namespace nv = lockstep::native;
using ls::Tensor;
using ls::testing::randn64;
using Inputs = std::vector<Tensor>;

namespace {

Tensor pair_op(const Inputs& v, const Tensor& rm, const Tensor& rv, const Tensor& rrm,
               const Tensor& rrv, bool training) {
  return ls::batch_norm_add_batch_norm_relu(v[0], v[1], v[2], rm, rv, v[3], v[4], v[5], rrm, rrv,
                                            training, 0.1, 1e-5);
}

// Whether the op saves its ReLU mask as bits (LOCKSTEP_BF16_RELU_BITS, default on).
bool bits_on() {
  const char* v = std::getenv("LOCKSTEP_BF16_RELU_BITS");
  return v == nullptr || std::string(v) != "0";
}

// Whether the op runs the reference, the two ops in turn (LOCKSTEP_BF16_BN_PAIR=0).
bool reference_on() {
  const char* v = std::getenv("LOCKSTEP_BF16_BN_PAIR");
  return v != nullptr && std::string(v) == "0";
}

}  // namespace

TEST_CASE(
    "batch_norm_add_batch_norm_relu matches batch_norm_add_relu(x, batch_norm(r)) in float64") {
  ls::manual_seed(66);
  for (bool training : {true, false}) {
    CAPTURE(training);
    const Inputs init = {randn64({4, 3, 3, 5}), randn64({3}), randn64({3}),
                         randn64({4, 3, 3, 5}), randn64({3}), randn64({3})};
    const Tensor gy = randn64({4, 3, 3, 5});
    std::vector<std::vector<double>> grads[2], stats[2];
    std::vector<double> outs[2];
    for (int fused = 0; fused < 2; ++fused) {
      Inputs v;
      for (const Tensor& t : init) v.push_back(t.clone().requires_grad_(true));
      std::vector<Tensor> running;  // rm, rv, rrm, rrv
      for (int k = 0; k < 2; ++k) {
        running.push_back(ls::zeros({3}, ls::kFloat64) + 0.5 * k);
        running.push_back(ls::ones({3}, ls::kFloat64) * (2.0 + k));
      }
      Tensor y =
          fused ? pair_op(v, running[0], running[1], running[2], running[3], training)
                : ls::batch_norm_add_relu(
                      v[0],
                      ls::batch_norm(v[3], v[4], v[5], running[2], running[3], training, 0.1, 1e-5),
                      v[1], v[2], running[0], running[1], training, 0.1, 1e-5);
      REQUIRE(y.grad_fn() != nullptr);
      CHECK(y.grad_fn()->name() ==
            (fused ? "BatchNormAddBatchNormReluBackward" : "BatchNormAddReluBackward"));
      (y * gy).sum().backward();
      outs[fused] = y.to_vector<double>();
      for (const Tensor& t : v) grads[fused].push_back(t.grad().to_vector<double>());
      for (const Tensor& t : running) stats[fused].push_back(t.to_vector<double>());
    }
    REQUIRE(outs[1].size() == outs[0].size());
    for (size_t e = 0; e < outs[0].size(); ++e) {
      CHECK(outs[1][e] == doctest::Approx(outs[0][e]).epsilon(1e-12).scale(1.0));
    }
    for (size_t k = 0; k < 6; ++k) {
      CAPTURE(k);
      REQUIRE(grads[1][k].size() == grads[0][k].size());
      for (size_t e = 0; e < grads[0][k].size(); ++e) {
        CHECK(grads[1][k][e] == doctest::Approx(grads[0][k][e]).epsilon(1e-12).scale(1.0));
      }
    }
    CHECK(stats[1] == stats[0]);
  }
}

TEST_CASE("batch_norm_add_batch_norm_relu: gradcheck and gradgradcheck, training and eval") {
  ls::manual_seed(67);
  for (bool training : {true, false}) {
    CAPTURE(training);
    const Tensor rm = randn64({2}),
                 rv = ls::rand({2}, ls::TensorOptions().dtype(ls::kFloat64)) + 0.5;
    for (int attempt = 0;; ++attempt) {  // inputs whose pre-ReLU values stay off the kink
      REQUIRE(attempt < 200);
      const Inputs v = {randn64({3, 2, 2, 2}), randn64({2}), randn64({2}),
                        randn64({3, 2, 2, 2}), randn64({2}), randn64({2})};
      const Tensor pre =
          ls::batch_norm(v[0], v[1], v[2], rm.clone(), rv.clone(), training, 0.1, 1e-5) +
          ls::batch_norm(v[3], v[4], v[5], rm.clone(), rv.clone(), training, 0.1, 1e-5);
      bool off_kink = true;
      for (double p : pre.to_vector<double>()) off_kink &= std::abs(p) >= 0.05;
      if (!off_kink) continue;
      auto f = [&](const Inputs& p) {
        return pair_op(p, rm.clone(), rv.clone(), rm.clone(), rv.clone(), training).pow(2.0);
      };
      CHECK_GRADCHECK(f, v);
      CHECK_GRADGRADCHECK(f, v);
      break;
    }
  }
}

TEST_CASE(
    "batch_norm_add_batch_norm_relu on channels-last bf16: the kernel's gradients and the bytes") {
  const ls::IntList shape{4, 40, 6, 6};
  const int64_t c = 40, rows = 4 * 6 * 6, a = 4 * 40 * 6 * 6 * 2;  // a: one bf16 activation
  ls::manual_seed(68);
  auto cl = [&](double scale) {
    return nv::channels_last(nv::to_dtype(ls::randn(shape) * scale, ls::kBFloat16));
  };
  Inputs v = {cl(1.5), ls::randn({c}), ls::randn({c}), cl(2.0), ls::randn({c}), ls::randn({c})};
  for (Tensor& t : v) t.requires_grad_(true);
  const Tensor gy = cl(1.0);
  ls::profiler::reset();
  ls::profiler::enable();
  const Tensor out = pair_op(v, ls::zeros({c}), ls::ones({c}), ls::zeros({c}), ls::ones({c}), true);
  out.backward(gy);
  ls::profiler::disable();
  // The kernels called directly, with the forward's mask (the output's: the same bits).
  ls::Tensor bits;
  const nv::BatchNormPairForward f = nv::batch_norm_pair_forward(
      v[0].detach(), {v[1].detach(), v[2].detach(), ls::zeros({c}), ls::ones({c})}, v[3].detach(),
      {v[4].detach(), v[5].detach(), ls::zeros({c}), ls::ones({c})}, true, 0.1, 1e-5, &bits);
  const nv::BatchNormPairGrads d = nv::batch_norm_pair_backward(
      gy, v[0].detach(), v[1].detach(), f.save_mean, f.save_invstd, v[3].detach(), v[4].detach(),
      f.residual_save_mean, f.residual_save_invstd, f.output, false, true,
      {true, true, true, true, true, true});
  const Tensor expected[] = {d.grad_input,    d.grad_weight,          d.grad_bias,
                             d.grad_residual, d.grad_residual_weight, d.grad_residual_bias};
  CHECK(ls::equal(nv::to_dtype(out.detach(), ls::kFloat32), nv::to_dtype(f.output, ls::kFloat32)));
  for (size_t k = 0; k < 6; ++k) {
    CAPTURE(k);
    CHECK(ls::equal(nv::to_dtype(v[k].grad(), ls::kFloat32),
                    nv::to_dtype(expected[k], ls::kFloat32)));
  }
  REQUIRE(bits.defined());
  const int64_t mask = bits_on() ? rows * 2 * ((c + 15) / 16) : a;  // bits, or the output saved
  const auto entries = ls::profiler::entries();
  const auto* fwd = ls::testing::find_entry(entries, "batch_norm_add_batch_norm_relu");
  const auto* bwd = ls::testing::find_entry(entries, "BatchNormAddBatchNormReluBackward");
  REQUIRE(fwd != nullptr);
  REQUIRE(bwd != nullptr);
  // The reference also writes bn_r(r) and reads it back, and the masked gradient in
  // backward: the two tensors the kernel never makes.
  const int64_t between = reference_on() ? 2 * a : 0;
  // forward: x, r and four (C) parameters read; the output (and the bits) written
  CHECK(fwd->self_mb ==
        doctest::Approx((3 * a + 4 * 4 * c + (bits_on() ? mask : 0) + between) * 1e-6));
  // backward: g, x, r, two weights, two means and invstds, the mask read; dx, dr and
  // four (C) gradients written
  CHECK(bwd->self_mb == doctest::Approx((5 * a + 10 * 4 * c + mask + between) * 1e-6));
}
